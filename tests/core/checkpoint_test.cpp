// Checkpoints: a full round trip of parameters, layer state and optimizer state, refusal of checkpoints
// of another model, a failed write that leaves the previous checkpoint untouched, and damage of any byte
// refused rather than loaded.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/layers/batch_norm2d.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/flatten.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/checkpoint.hpp"
#include "models/registry.hpp"
#include "tests/fuzz/checkpoint_model.hpp"
#include "tests/data/fixtures.hpp"

namespace ddl {
namespace {

TEST(Checkpoint, RoundTripRestoresEverything) {
  test::TempDir dir;
  Context ctx;
  auto model = make_model("seed_cnn_bn", {.seed = 3}, ctx);
  model->initialize(3);
  auto adam = make_adam(model->param_count(), {});
  std::vector<float> grads(model->param_count(), 0.01f);
  adam->step(model->params(), grads, 1e-3f);
  model->state()[0].floats[1] = 0.75f;  // a BatchNorm running mean
  save_checkpoint(dir / "c.h5", *model, *adam, {"seed_cnn_bn", 7, 0.5, 3, "lr = 0.001\n"});
  EXPECT_FALSE(std::filesystem::exists(dir / "c.h5.tmp"));

  auto other = make_model("seed_cnn_bn", {.seed = 9}, ctx);
  other->initialize(9);
  auto other_adam = make_adam(other->param_count(), {});
  const TrainingState state = load_checkpoint(dir / "c.h5", *other, other_adam.get());
  EXPECT_EQ(state.epochs_done, 7u);
  EXPECT_EQ(state.seed, 3u);
  EXPECT_DOUBLE_EQ(state.best_accuracy, 0.5);
  EXPECT_EQ(state.configuration, "lr = 0.001\n");
  EXPECT_EQ(std::memcmp(model->params().data(), other->params().data(), model->param_count() * 4), 0);
  auto a = model->state(), b = other->state();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(std::equal(a[i].floats.begin(), a[i].floats.end(), b[i].floats.begin())) << a[i].name;
    EXPECT_TRUE(std::equal(a[i].words.begin(), a[i].words.end(), b[i].words.begin())) << a[i].name;
  }
  auto sa = adam->state(), sb = other_adam->state();
  EXPECT_TRUE(std::equal(sa[1].floats.begin(), sa[1].floats.end(), sb[1].floats.begin()));  // Adam's v
  EXPECT_EQ(sb[2].words[0], 1u);                                                            // step count
}

// The in-memory form (a file image passed between ranks when a run changes layout): written by two
// pipeline stages in turn, read back whole, and by each stage of another cut.
TEST(Checkpoint, FileImageInMemoryRoundTripsAcrossCuts) {
  Context ctx;
  auto whole = make_model("seed_cnn_bn", {.seed = 3}, ctx);
  whole->initialize(3);
  const std::size_t layers = whole->num_layers();
  auto stage_model = [&](std::size_t begin, std::size_t end) {
    auto m = make_model("seed_cnn_bn", {.seed = 3}, ctx, {begin, end});
    m->initialize(3);
    return m;
  };
  auto first = stage_model(0, 3), second = stage_model(3, layers);
  auto adam_first = make_adam(first->param_count(), {}), adam_second = make_adam(second->param_count(), {});
  for (auto [m, adam] : {std::pair{first.get(), adam_first.get()}, std::pair{second.get(), adam_second.get()}}) {
    std::vector<float> grads(m->param_count(), 0.01f);
    adam->step(m->params(), grads, 1e-3f);
  }
  second->state()[0].floats[1] = 0.75f;  // a BatchNorm running mean
  const TrainingState state{"seed_cnn_bn", 2, 0.25, 3, "lr = 0.001\n", 5};
  std::vector<char> image;
  write_checkpoint_image_part(image, *first, *adam_first, state, {true, true});
  write_checkpoint_image_part(image, *second, *adam_second, state, {false, true});

  auto adam = make_adam(whole->param_count(), {});
  const TrainingState back = load_checkpoint_image(image, *whole, adam.get());
  EXPECT_EQ(back.epochs_done, 2u);
  EXPECT_EQ(back.steps_done, 5u);
  const std::size_t n1 = first->param_count();
  EXPECT_EQ(std::memcmp(whole->params().data(), first->params().data(), n1 * 4), 0);
  EXPECT_EQ(std::memcmp(whole->params().data() + n1, second->params().data(), second->param_count() * 4), 0);
  EXPECT_EQ(std::memcmp(adam->state()[1].floats.data() + n1, adam_second->state()[1].floats.data(),
                        second->param_count() * 4), 0);  // Adam's v
  auto other_cut = stage_model(5, layers);
  const std::size_t before = whole->param_count() - other_cut->param_count();
  load_checkpoint_image(image, *other_cut, nullptr);
  EXPECT_EQ(std::memcmp(other_cut->params().data(), whole->params().data() + before, other_cut->param_count() * 4), 0);
  // An image cut short is refused, like a file.
  image.resize(image.size() / 2);
  EXPECT_THROW(load_checkpoint_image(image, *whole, adam.get()), InputError);
}

TEST(Checkpoint, KeepsTheClassNamesAndTheNormalisationUnderTheHeaderChecksum) {
  test::TempDir dir;
  Context ctx;
  auto model = make_model("seed_cnn", {}, ctx);
  auto sgd = make_sgd(model->param_count(), {});
  TrainingState state{"seed_cnn", 1, 0.5, 1, "lr = 0.001\n"};
  state.class_names = {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  state.input_mean = {0.49, 0.48, 0.45};
  state.input_std = {0.25, 0.24, 0.26};
  save_checkpoint(dir / "c.h5", *model, *sgd, state);
  const TrainingState back = load_checkpoint(dir / "c.h5", *model, nullptr);
  EXPECT_EQ(back.class_names, state.class_names);
  EXPECT_EQ(back.input_mean, state.input_mean);
  EXPECT_EQ(back.input_std, state.input_std);
  // A class name changed in place is refused (by HDF5's checksum of the object header that holds it).
  std::ifstream in(dir / "c.h5", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const auto at = bytes.find("automobile");
  ASSERT_NE(at, std::string::npos);
  bytes[at] = 'A';
  std::ofstream(dir / "c.h5", std::ios::binary | std::ios::trunc) << bytes;
  try {
    load_checkpoint(dir / "c.h5", *model, nullptr);
    ADD_FAILURE() << "a changed class name was loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("c.h5: "), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, LoadsAFormat2Checkpoint) {
  // Written by the ddl before format 3 (tests/core/data/README.md): the same model, seed and step here.
  Context ctx;
  auto expected = fuzz::checkpoint_model(ctx, 0);
  auto adam = make_adam(expected->param_count(), {});
  std::vector<float> grads(expected->param_count(), 0.01f);
  adam->step(expected->params(), grads, 1e-3f);
  auto loaded = fuzz::checkpoint_model(ctx, 0);
  loaded->initialize(2);
  auto loaded_adam = make_adam(loaded->param_count(), {});
  const TrainingState state = load_checkpoint(DDL_TEST_DATA "/checkpoint_format2.h5", *loaded, loaded_adam.get());
  EXPECT_EQ(state.epochs_done, 3u);
  EXPECT_EQ(state.seed, 7u);
  EXPECT_DOUBLE_EQ(state.best_accuracy, 0.5);
  EXPECT_TRUE(state.class_names.empty());
  EXPECT_TRUE(state.input_mean.empty());
  EXPECT_EQ(std::memcmp(expected->params().data(), loaded->params().data(), expected->param_count() * 4), 0);
  EXPECT_EQ(loaded_adam->state()[2].words[0], 1u);  // Adam's step count
}

TEST(Checkpoint, RefusesAnotherModelsCheckpoint) {
  test::TempDir dir;
  Context ctx;
  auto bn = make_model("seed_cnn_bn", {}, ctx);
  auto sgd = make_sgd(bn->param_count(), {});
  save_checkpoint(dir / "bn.h5", *bn, *sgd, {"seed_cnn_bn", 1, 0, 1, ""});
  auto plain = make_model("seed_cnn", {}, ctx);
  EXPECT_THROW(load_checkpoint(dir / "bn.h5", *plain, nullptr), InputError);
  std::ofstream(dir / "junk.h5") << "junk";
  EXPECT_THROW(load_checkpoint(dir / "junk.h5", *plain, nullptr), InputError);
}

TEST(Checkpoint, FailedWriteLeavesThePreviousCheckpointIntact) {
  test::TempDir dir;
  Context ctx;
  auto model = make_model("seed_cnn", {}, ctx);
  model->initialize(1);
  auto sgd = make_sgd(model->param_count(), {});
  save_checkpoint(dir / "last.h5", *model, *sgd, {"seed_cnn", 1, 0, 1, ""});
  const auto before = std::filesystem::file_size(dir / "last.h5");
  // The temporary name is taken by a directory: the write fails before the rename.
  std::filesystem::create_directory(dir / "last.h5.tmp");
  model->initialize(2);
  EXPECT_THROW(save_checkpoint(dir / "last.h5", *model, *sgd, {"seed_cnn", 2, 0, 1, ""}), Error);
  auto restored = make_model("seed_cnn", {}, ctx);
  EXPECT_EQ(load_checkpoint(dir / "last.h5", *restored, nullptr).epochs_done, 1u);
  EXPECT_EQ(std::filesystem::file_size(dir / "last.h5"), before);
  auto first = make_model("seed_cnn", {}, ctx);
  first->initialize(1);
  EXPECT_EQ(std::memcmp(first->params().data(), restored->params().data(), first->param_count() * 4), 0);
}

TEST(Checkpoint, KeepsThePreviousFileWhenAsked) {
  test::TempDir dir;
  Context ctx;
  auto model = make_model("seed_cnn", {}, ctx);
  model->initialize(1);
  auto sgd = make_sgd(model->param_count(), {});
  const std::string last = dir / "last.h5";
  EXPECT_EQ(previous_checkpoint(last), dir / "last.prev.h5");
  save_checkpoint(last, *model, *sgd, {"seed_cnn", 1, 0, 1, ""}, true);
  EXPECT_FALSE(std::filesystem::exists(previous_checkpoint(last)));  // nothing before the first
  save_checkpoint(last, *model, *sgd, {"seed_cnn", 2, 0, 1, ""}, true);
  save_checkpoint(last, *model, *sgd, {"seed_cnn", 3, 0, 1, ""}, true);
  auto restored = make_model("seed_cnn", {}, ctx);
  EXPECT_EQ(load_checkpoint(last, *restored, nullptr).epochs_done, 3u);
  EXPECT_EQ(load_checkpoint(previous_checkpoint(last), *restored, nullptr).epochs_done, 2u);
}

// A model of a few hundred values, with layer state (BatchNorm) and optimizer state (Adam), so that every
// byte of its checkpoint can be damaged in turn.
std::unique_ptr<Model> tiny_model(Context& ctx, std::uint64_t seed) {
  auto model = std::make_unique<Model>("tiny", dims_t{2, 4, 4}, 3);
  model->add(std::make_unique<Conv2d>(Conv2dOptions{.in_channels = 2, .out_channels = 3, .kernel = 3, .padding = 1}));
  model->add(std::make_unique<BatchNorm2d>(BatchNorm2dOptions{.channels = 3}));
  model->add(std::make_unique<Flatten>());
  model->add(std::make_unique<Dense>(DenseOptions{.in_features = 3 * 16, .out_features = 3}));
  model->finalize(ctx);
  model->initialize(seed);
  return model;
}

TEST(Checkpoint, EveryDamagedByteIsRefusedOrHarmless) {
  test::TempDir dir;
  Context ctx;
  auto model = tiny_model(ctx, 3);
  auto adam = make_adam(model->param_count(), {});
  std::vector<float> grads(model->param_count(), 0.01f);
  adam->step(model->params(), grads, 1e-3f);
  model->state()[0].floats[1] = 0.75f;
  const TrainingState written{"tiny", 200, 0.5, 3, "lr = 0.001\nbatch-size = 64\n", 17};
  save_checkpoint(dir / "good.h5", *model, *adam, written);
  std::ifstream in(dir / "good.h5", std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(good.size(), 1000u);

  // Each byte in turn gets one bit flipped. A load must either refuse the file (an InputError naming it)
  // or give back exactly what was written: a flip in bytes HDF5 never reads (free space) is harmless.
  std::size_t refused = 0, harmless = 0;
  const std::string damaged = dir / "damaged.h5";
  for (std::size_t at = 0; at < good.size(); ++at) {
    std::string bytes = good;
    bytes[at] = static_cast<char>(bytes[at] ^ (1 << (at % 8)));
    std::ofstream(damaged, std::ios::binary | std::ios::trunc) << bytes;
    auto loaded = tiny_model(ctx, 9);
    auto loaded_adam = make_adam(loaded->param_count(), {});
    TrainingState state;
    try {
      state = load_checkpoint(damaged, *loaded, loaded_adam.get());
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(damaged), std::string::npos) << e.what();
      ++refused;
      continue;
    }
    ++harmless;
    EXPECT_EQ(state.epochs_done, written.epochs_done) << "byte " << at;
    EXPECT_EQ(state.steps_done, written.steps_done) << "byte " << at;
    EXPECT_EQ(state.seed, written.seed) << "byte " << at;
    EXPECT_EQ(state.configuration, written.configuration) << "byte " << at;
    EXPECT_EQ(std::memcmp(model->params().data(), loaded->params().data(), model->param_count() * 4), 0)
        << "byte " << at;
    EXPECT_EQ(model->state()[0].floats[1], loaded->state()[0].floats[1]) << "byte " << at;
    const auto a = adam->state(), b = loaded_adam->state();
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(std::equal(a[i].floats.begin(), a[i].floats.end(), b[i].floats.begin())) << "byte " << at;
      EXPECT_TRUE(std::equal(a[i].words.begin(), a[i].words.end(), b[i].words.begin())) << "byte " << at;
    }
  }
  // Most bytes matter; some (padding, free space) do not.
  EXPECT_GT(refused, good.size() / 2) << refused << " refused, " << harmless << " harmless";
}

TEST(Checkpoint, ADamagedTensorIsNamed) {
  test::TempDir dir;
  Context ctx;
  auto model = tiny_model(ctx, 3);
  auto sgd = make_sgd(model->param_count(), {});
  model->params()[5] = 1234.5f;
  save_checkpoint(dir / "c.h5", *model, *sgd, {"tiny", 1, 0, 1, ""});
  std::ifstream in(dir / "c.h5", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const float value = 1234.5f;
  const auto at = bytes.find(std::string(reinterpret_cast<const char*>(&value), 4));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = static_cast<char>(bytes[at + 1] ^ 0x10);
  std::ofstream(dir / "c.h5", std::ios::binary | std::ios::trunc) << bytes;
  auto loaded = tiny_model(ctx, 9);
  try {
    load_checkpoint(dir / "c.h5", *loaded, nullptr);
    ADD_FAILURE() << "a damaged parameter was loaded";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir / "c.h5" + ": tensor 'params' is damaged (its checksum does not match, or "
                                                     "the file is cut short)");
  }
}

}  // namespace
}  // namespace ddl
