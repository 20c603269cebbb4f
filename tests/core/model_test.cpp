#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>

#include "core/error.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/pool2d.hpp"
#include "core/layers/sequential.hpp"
#include "core/layers/softmax_cross_entropy.hpp"
#include "core/optim/optimizer.hpp"
#include "models/registry.hpp"
#include "tests/core/tensor_util.hpp"

namespace ddl {
namespace {

TEST(SeedCnn, HasThePapersParameterCountAndShapes) {
  Context ctx;
  auto model = make_model("seed_cnn", {.num_classes = 10}, ctx);
  EXPECT_EQ(model->param_count(), 282250u);
  const std::string summary = model->summary(ctx);
  EXPECT_NE(summary.find("[32x32x32]"), std::string::npos) << summary;
  EXPECT_NE(summary.find("[64x8x8]"), std::string::npos) << summary;
  EXPECT_NE(summary.find("[4096]"), std::string::npos) << summary;
  EXPECT_NE(summary.find("total parameters: 282250"), std::string::npos) << summary;
}

// A layer described at length (a graph piece lists its operators) keeps its row whole: one line a layer.
TEST(ModelSummary, ALongDescriptionKeepsItsRowWhole) {
  Context ctx;
  Model model("long", dims_t{4, 1, 1}, 4);
  model.add(std::make_unique<Flatten>());
  Sequential described(std::string(200, 'x'));
  described.emplace<Dense>(DenseOptions{.in_features = 4, .out_features = 4});
  model.add(std::make_unique<Sequential>(std::move(described)));
  model.finalize(ctx);
  const std::string summary = model.summary(ctx);
  EXPECT_NE(summary.find(std::string(200, 'x') + " [4]"), std::string::npos) << summary;
  EXPECT_NE(summary.find("         20\n  total parameters: 20"), std::string::npos) << summary;
}

TEST(ModelRegistry, UnknownNameIsAnInputError) {
  Context ctx;
  EXPECT_THROW(make_model("resnet9000", {}, ctx), InputError);
}

TEST(Initializer, GlorotUniformBoundsAndSpread) {
  Context ctx;
  auto model = make_model("seed_cnn", {}, ctx);
  model->initialize(42);
  const auto& conv2 = model->param_entries()[2];  // 2.weight: 64x32x3x3
  ASSERT_EQ(conv2.name, "2.weight");
  const double limit = std::sqrt(6.0 / (32 * 9 + 64 * 9));
  double sum = 0, sq = 0;
  for (std::size_t i = 0; i < conv2.size; ++i) {
    const double v = model->params()[conv2.offset + i];
    ASSERT_LE(std::abs(v), limit);
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / conv2.size, 0.0, 0.01);
  EXPECT_NEAR(sq / conv2.size, limit * limit / 3, 0.05 * limit * limit);
  const auto& bias = model->param_entries()[3];
  for (std::size_t i = 0; i < bias.size; ++i) EXPECT_EQ(model->params()[bias.offset + i], 0.0f);
}

TEST(Initializer, SameSeedSameBitsOtherSeedOtherBits) {
  Context ctx;
  auto a = make_model("seed_cnn", {}, ctx), b = make_model("seed_cnn", {}, ctx), c = make_model("seed_cnn", {}, ctx);
  a->initialize(7);
  b->initialize(7);
  c->initialize(8);
  EXPECT_EQ(std::memcmp(a->params().data(), b->params().data(), a->param_count() * 4), 0);
  EXPECT_NE(std::memcmp(a->params().data(), c->params().data(), a->param_count() * 4), 0);
}

// A few steps of training on fixed random data; returns the parameters.
std::vector<float> train_steps(const std::string& name, std::uint64_t seed, int steps) {
  Context ctx;
  auto model = make_model(name, {.num_classes = 10, .seed = seed}, ctx);
  model->initialize(seed);
  auto adam = make_adam(model->param_count(), {});
  SoftmaxCrossEntropy loss;
  const dims_t dims = {16, 3, 32, 32};
  Tensor x = test::from_plain(ctx, test::random_values(product(dims), 3, 0, 1), plain_desc(dims));
  std::vector<std::int32_t> labels(16);
  for (int i = 0; i < 16; ++i) labels[i] = i % 10;
  for (int s = 0; s < steps; ++s) {
    loss.forward(ctx, model->forward(ctx, x, Mode::train), labels);
    model->backward(ctx, loss.backward());
    adam->step(model->params(), model->grads(), 1e-3f);
  }
  return {model->params().begin(), model->params().end()};
}

TEST(Determinism, SameSeedSameBitsAfterTraining) {
  for (const char* name : {"seed_cnn", "seed_cnn_bn"}) {
    const auto a = train_steps(name, 5, 3), b = train_steps(name, 5, 3);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << name;
    const auto start = train_steps(name, 5, 0);
    EXPECT_NE(std::memcmp(a.data(), start.data(), a.size() * sizeof(float)), 0) << name << " did not train";
  }
}

TEST(Training, LossFallsOnAFixedBatch) {
  Context ctx;
  auto model = make_model("seed_cnn", {}, ctx);
  model->initialize(1);
  auto adam = make_adam(model->param_count(), {});
  SoftmaxCrossEntropy loss;
  const dims_t dims = {32, 3, 32, 32};
  Tensor x = test::from_plain(ctx, test::random_values(product(dims), 9, 0, 1), plain_desc(dims));
  std::vector<std::int32_t> labels(32);
  for (int i = 0; i < 32; ++i) labels[i] = (i * 7) % 10;
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    const auto sums = loss.forward(ctx, model->forward(ctx, x, Mode::train), labels);
    (s == 0 ? first : last) = sums.loss / 32;
    model->backward(ctx, loss.backward());
    adam->step(model->params(), model->grads(), 1e-3f);
  }
  EXPECT_NEAR(first, std::log(10.0), 0.3);
  EXPECT_LT(last, 0.5 * first);
}

// The model chains layers through oneDNN's blocked layouts and slices of the flat buffers: check the
// whole chain's parameter gradients against finite differences of the real loss.
TEST(ModelGradient, WholeNetworkMatchesFiniteDifferences) {
  Context ctx;
  Model model("tiny", {3, 6, 6}, 4);
  model.add(std::make_unique<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 17, .kernel = 3, .padding = 1}));
  model.add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::avg_include_padding, .kernel = 2, .stride = 2}));
  model.add(std::make_unique<Flatten>());
  model.add(std::make_unique<Dense>(DenseOptions{.in_features = 17 * 9, .out_features = 4}));
  model.finalize(ctx);
  model.initialize(3);
  SoftmaxCrossEntropy loss;
  const dims_t dims = {2, 3, 6, 6};
  Tensor x = test::from_plain(ctx, test::random_values(product(dims), 4), plain_desc(dims));
  std::vector<std::int32_t> labels = {1, 3};
  loss.forward(ctx, model.forward(ctx, x, Mode::train), labels);
  model.backward(ctx, loss.backward());
  const std::vector<float> analytic(model.grads().begin(), model.grads().end());
  auto value = [&] { return loss.forward(ctx, model.forward(ctx, x, Mode::train), labels).loss / 2; };
  for (std::size_t i = 0; i < model.param_count(); i += 37) {
    float& p = model.params()[i];
    const float original = p;
    p = original + 1e-2f;
    const double up = value();
    p = original - 1e-2f;
    const double down = value();
    p = original;
    EXPECT_NEAR(analytic[i], (up - down) / 2e-2, 2e-3 + 2e-2 * std::abs(analytic[i])) << "param " << i;
  }
}

TEST(ModelGradient, GradientsReadyHookCoversEveryParameterOnce) {
  Context ctx;
  auto model = make_model("seed_cnn", {}, ctx);
  model->initialize(1);
  std::vector<int> seen(model->param_count(), 0);
  std::vector<std::size_t> order;
  model->on_gradients_ready = [&](std::size_t offset, std::size_t count) {
    order.push_back(offset);
    for (std::size_t i = offset; i < offset + count; ++i) ++seen[i];
  };
  SoftmaxCrossEntropy loss;
  Tensor x = test::from_plain(ctx, test::random_values(3 * 32 * 32 * 2, 1, 0, 1), plain_desc({2, 3, 32, 32}));
  std::vector<std::int32_t> labels = {0, 1};
  loss.forward(ctx, model->forward(ctx, x, Mode::train), labels);
  model->backward(ctx, loss.backward());
  for (int s : seen) ASSERT_EQ(s, 1);
  ASSERT_EQ(order.size(), 4u);  // two convolutions and two dense layers, last first
  EXPECT_GT(order.front(), order.back());
}

// A weight two layers share (an imported graph's initializer that both read) is trained as one: each copy takes
// the sum of the copies' gradients. A layout that would part the copies (a pipeline stage holding one) is
// refused.
TEST(ModelTraining, TiedParametersTakeTheSumOfTheirGradients) {
  Context ctx;
  const auto two_dense = [] {
    auto model = std::make_unique<Model>("tied", dims_t{4, 1, 1}, 4);
    model->add(std::make_unique<Flatten>());
    model->add(std::make_unique<Dense>(DenseOptions{.in_features = 4, .out_features = 4}));
    model->add(std::make_unique<Dense>(DenseOptions{.in_features = 4, .out_features = 4}));
    model->tie_parameters({{"1.weight", "2.weight"}});
    return model;
  };
  auto model = two_dense();
  model->finalize(ctx);
  ASSERT_TRUE(model->has_tied_parameters());
  const std::span<float> grads = model->grads();
  ASSERT_EQ(grads.size(), 2u * (16 + 4));
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i);
  model->tie_gradients();
  for (std::size_t k = 0; k < 16; ++k) {
    EXPECT_EQ(grads[k], static_cast<float>(k + 20 + k));  // 1.weight at 0, 2.weight at 20
    EXPECT_EQ(grads[20 + k], grads[k]);
  }
  for (std::size_t k = 16; k < 20; ++k) EXPECT_EQ(grads[k], static_cast<float>(k));  // the biases are not tied
  EXPECT_EQ(grads[36], 36.0f);

  auto stage = two_dense();
  EXPECT_EQ(stage->kept_with_previous(3), (std::vector<bool>{false, false, true}));  // what the planner avoids
  stage->keep_layers(2, 3);
  EXPECT_THROW(stage->finalize(ctx), InputError);
}

// Steps served from the buffer pool's learned arena (a context whose steps are marked, as the trainer's
// are) train exactly as steps served one buffer at a time: with outputs given back after backward, a
// residual network's tensors share the arena's places, an evaluation between steps switches the pool to
// another kind and back, and a last, smaller batch asks for what the arena was not learned for.
TEST(ModelTraining, StepsServedFromTheLearnedArenaMatchUnmarkedStepsBitForBit) {
  const auto train = [](bool mark_steps) {
    Context ctx;
    auto model = make_model("resnet18_cifar", {.num_classes = 10}, ctx);
    model->initialize(5);
    auto sgd = make_sgd(model->param_count(), {.momentum = 0.9f});
    SoftmaxCrossEntropy loss;
    std::vector<double> losses;
    for (int step = 0; step < 8; ++step) {
      const bool evaluation = step == 5, last_batch = step == 7;
      const dnnl::memory::dim n = last_batch ? 2 : 4;
      Tensor x = test::from_plain(ctx, test::random_values(static_cast<std::size_t>(n) * 3 * 32 * 32, 10 + step),
                                  plain_desc({n, 3, 32, 32}));
      std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>((i * 7 + step) % 10);
      if (mark_steps) ctx.begin_step(evaluation ? 1 : 0);
      const Mode mode = evaluation ? Mode::infer : Mode::train;
      losses.push_back(loss.forward(ctx, model->forward(ctx, x, mode), labels).loss);
      if (evaluation) continue;
      model->backward(ctx, loss.backward());
      sgd->step(model->params(), model->grads(), 0.01f);
    }
    std::vector<float> params(model->params().begin(), model->params().end());
    return std::pair{losses, params};
  };
  const auto [marked_losses, marked_params] = train(true);
  const auto [plain_losses, plain_params] = train(false);
  EXPECT_EQ(marked_losses, plain_losses);
  ASSERT_EQ(marked_params.size(), plain_params.size());
  EXPECT_EQ(std::memcmp(marked_params.data(), plain_params.data(), marked_params.size() * sizeof(float)), 0);
}

// Recomputation drops a segment's activations after its forward and runs the forward again before its
// backward: the gradients, the parameters and the layers' state (BatchNorm's running statistics, dropout's
// generators) are the stored run's bit for bit, and the step's learned arena, the most bytes alive at once,
// is smaller.
TEST(ModelTraining, RecomputedActivationsGiveTheSameBitsInLessMemory) {
  struct Net {
    std::string name;
    ModelConfig config;
    dnnl::memory::dim image;
  };
  const Net nets[] = {{"seed_cnn_bn", {.num_classes = 10}, 32},
                      {"resnet18_cifar", {.num_classes = 10}, 32},
                      {"vit_tiny", {.num_classes = 10, .seed = 3, .image_size = 32, .dropout = 0.1f, .patch_size = 8,
                                    .depth = 3, .width = 96, .heads = 6}, 32}};
  for (const Net& net : nets) {
    struct Run {
      std::vector<std::vector<float>> grads;
      std::vector<float> params, state;
      std::size_t arena = 0;
    };
    const auto train = [&](bool recompute) {
      Context ctx;
      auto model = make_model(net.name, net.config, ctx);
      model->initialize(5);
      model->recompute_activations(recompute);
      auto sgd = make_sgd(model->param_count(), {.momentum = 0.9f});
      SoftmaxCrossEntropy loss;
      Run run;
      // Step 4 follows an evaluation's forward, and step 5 is a smaller last batch: both set the model up
      // again, and its segments with it.
      for (int step = 0; step < 6; ++step) {
        const dnnl::memory::dim n = step == 5 ? 3 : 4;
        const dims_t dims = {n, 3, net.image, net.image};
        Tensor x = test::from_plain(ctx, test::random_values(product(dims), 20 + step), plain_desc(dims));
        std::vector<std::int32_t> labels{1, 7, 3, static_cast<std::int32_t>(step)};
        labels.resize(static_cast<std::size_t>(n));
        if (step == 4) model->forward(ctx, x, Mode::infer);
        ctx.begin_step(0);
        if (step == 3) run.arena = ctx.step_arena_bytes(0);  // learned from steps 1 and 2
        loss.forward(ctx, model->forward(ctx, x, Mode::train), labels);
        model->backward(ctx, loss.backward());
        run.grads.emplace_back(model->grads().begin(), model->grads().end());
        sgd->step(model->params(), model->grads(), 0.01f);
      }
      run.params.assign(model->params().begin(), model->params().end());
      for (const StateView& v : model->state()) {
        run.state.insert(run.state.end(), v.floats.begin(), v.floats.end());
        for (std::uint64_t w : v.words) run.state.push_back(static_cast<float>(w % 1000003));
      }
      return run;
    };
    const Run stored = train(false), recomputed = train(true);
    ASSERT_EQ(stored.grads.size(), recomputed.grads.size());
    for (std::size_t step = 0; step < stored.grads.size(); ++step)
      EXPECT_EQ(stored.grads[step], recomputed.grads[step]) << net.name << ", step " << step;
    EXPECT_EQ(stored.params, recomputed.params) << net.name;
    EXPECT_EQ(stored.state, recomputed.state) << net.name;
    EXPECT_FALSE(stored.state.empty()) << net.name;
    EXPECT_GT(stored.arena, 0u) << net.name;
    EXPECT_LT(recomputed.arena, stored.arena) << net.name;
    std::cout << net.name << ": step arena " << stored.arena / 1024 << " KiB stored, " << recomputed.arena / 1024
              << " KiB recomputed\n";
  }
}

}  // namespace
}  // namespace ddl
