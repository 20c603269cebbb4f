// Checkpoints: a full round trip of parameters, layer state and optimizer state, refusal of checkpoints
// of another model, and a failed write that leaves the previous checkpoint untouched.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/checkpoint.hpp"
#include "models/registry.hpp"
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

}  // namespace
}  // namespace ddl
