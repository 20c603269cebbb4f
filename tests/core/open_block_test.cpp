// Blocks opened into the model's chain (open_block.hpp): the Fork and Join against finite differences, against
// the Residual and Concat layers they stand for (the same bits), and a model cut into pipeline stages between a
// Fork and its Join against the whole model.
#include <gtest/gtest.h>

#include <cstring>

#include "core/layers/batch_norm2d.hpp"
#include "core/layers/concat.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/open_block.hpp"
#include "core/layers/pool2d.hpp"
#include "core/layers/residual.hpp"
#include "core/model.hpp"
#include "tests/core/gradient_check.hpp"

namespace ddl {
namespace {
namespace opened_blocks {  // the helpers' names are this file's alone in a unity build

using test::check_gradients;

const test::GradientCheckOptions kPiecewise = {.step = 1e-3f, .abs_tolerance = 5e-3f};

std::unique_ptr<Conv2d> conv(int in, int out, int stride = 1, bool relu = false, int kernel = 3) {
  return std::make_unique<Conv2d>(Conv2dOptions{
      .in_channels = in, .out_channels = out, .kernel = kernel, .stride = stride, .padding = kernel / 2, .relu = relu});
}

Sequential chain(std::vector<std::unique_ptr<Layer>> layers) {
  Sequential s;
  for (auto& l : layers) s.add(std::move(l));
  return s;
}

template <typename... L>
std::vector<std::unique_ptr<Layer>> layers(std::unique_ptr<L>... l) {
  std::vector<std::unique_ptr<Layer>> all;
  (all.push_back(std::move(l)), ...);
  return all;
}

// [Fork, the body's layers, Join] as one layer, for the checks that take one.
Sequential opened(dims_t side_dims, Sequential shortcut, std::vector<std::unique_ptr<Layer>> body, JoinKind kind,
                  bool relu = false) {
  auto side = std::make_shared<SideValue>(SideValue{.dims = std::move(side_dims)});
  Sequential s;
  s.emplace<Fork>(side, std::move(shortcut));
  for (auto& l : body) s.add(std::move(l));
  s.emplace<Join>(side, kind, relu);
  return s;
}

TEST(OpenBlockGradient, AdditionsAndConcatenationsAgainstFiniteDifferences) {
  {
    SCOPED_TRACE("identity shortcut, ReLU after the sum");
    Sequential s = opened({4, 5, 5}, Sequential(), layers(conv(4, 4, 1, true), conv(4, 4)), JoinKind::add, true);
    check_gradients(s, {2, 4, 5, 5}, kPiecewise);
  }
  {
    SCOPED_TRACE("strided projection shortcut, a BatchNorm last in the body");
    Sequential s =
        opened({8, 3, 3}, chain(layers(conv(4, 8, 2, false, 1))),
               layers(conv(4, 8, 2), std::make_unique<BatchNorm2d>(BatchNorm2dOptions{.channels = 8})), JoinKind::add);
    check_gradients(s, {2, 4, 5, 5}, kPiecewise);
  }
  for (const JoinKind kind : {JoinKind::concat_side_first, JoinKind::concat_side_last}) {
    SCOPED_TRACE(kind == JoinKind::concat_side_first ? "concatenated, side first" : "concatenated, side last");
    Sequential s = opened({4, 5, 5}, Sequential(), layers(conv(4, 16)), kind);
    check_gradients(s, {2, 4, 5, 5}, kPiecewise);
  }
}

// The layer's output and gradients for an input and an output gradient drawn from `seed`, its parameters
// `values`.
struct Results {
  std::vector<float> output, diff_src, grads;
};
Results run(Layer& layer, const std::vector<float>& values, const dims_t& in, std::uint64_t seed) {
  Context ctx;
  test::BoundParams bound(layer, values, ctx);
  const auto out_md = layer.setup(ctx, plain_desc(in), Mode::train, true);
  Tensor x = test::from_plain(ctx, test::random_values(product(in), seed), plain_desc(in));
  Results r;
  const Tensor& y = layer.forward(ctx, x);
  r.output = test::to_plain(ctx, y);
  Tensor diff = test::from_plain(ctx, test::random_values(product(dims_of(out_md)), seed + 1), y.desc());
  r.diff_src = test::to_plain(ctx, layer.backward(ctx, diff));
  r.grads = bound.gradients();
  return r;
}

// Opened, a block computes what the Residual and Concat layers compute, bit for bit: the same primitives.
TEST(OpenBlock, SameBitsAsTheResidualAndConcatLayers) {
  const dims_t in = {2, 8, 6, 6};
  const std::size_t body_params = (8 * 8 * 9 + 8) * 2, shortcut_params = 8 * 8 + 8;
  const auto body_values = test::random_values(body_params, 3, -0.3f, 0.3f);
  const auto shortcut_values = test::random_values(shortcut_params, 4, -0.3f, 0.3f);
  auto cat = [](std::vector<float> a, const std::vector<float>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  {
    Residual block("block", chain(layers(conv(8, 8, 1, true), conv(8, 8))), chain(layers(conv(8, 8, 1, false, 1))),
                   true);
    Sequential open = opened({8, 6, 6}, chain(layers(conv(8, 8, 1, false, 1))), layers(conv(8, 8, 1, true), conv(8, 8)),
                             JoinKind::add, true);
    const Results a = run(block, cat(body_values, shortcut_values), in, 9);
    const Results b = run(open, cat(shortcut_values, body_values), in, 9);
    EXPECT_EQ(a.output, b.output);
    EXPECT_EQ(a.diff_src, b.diff_src);
    EXPECT_EQ(a.grads, cat(std::vector<float>(b.grads.begin() + shortcut_params, b.grads.end()),
                           std::vector<float>(b.grads.begin(), b.grads.begin() + shortcut_params)));
  }
  {
    std::vector<Sequential> branches;
    branches.push_back(Sequential());
    branches.push_back(chain(layers(conv(8, 8, 1, true), conv(8, 8))));
    Concat block("block", std::move(branches));
    Sequential open =
        opened({8, 6, 6}, Sequential(), layers(conv(8, 8, 1, true), conv(8, 8)), JoinKind::concat_side_first);
    const Results a = run(block, body_values, in, 11);
    const Results b = run(open, body_values, in, 11);
    EXPECT_EQ(a.output, b.output);
    EXPECT_EQ(a.diff_src, b.diff_src);
    EXPECT_EQ(a.grads, b.grads);
  }
}

// conv, fork, conv +relu, conv, join by addition +relu, fork (a projection), conv, join by concatenation,
// pool, flatten, dense: each layer's input dims given, as the importer gives them.
std::unique_ptr<Model> two_blocks() {
  auto model = std::make_unique<Model>("two blocks", dims_t{3, 6, 6}, 5);
  auto first = std::make_shared<SideValue>(SideValue{.dims = {8, 6, 6}});
  auto second = std::make_shared<SideValue>(SideValue{.dims = {4, 6, 6}});
  const dims_t at8 = {8, 6, 6};
  model->add(conv(3, 8), {3, 6, 6});
  model->add(std::make_unique<Fork>(first, Sequential()), at8);
  model->add(conv(8, 8, 1, true), at8);
  model->add(conv(8, 8), at8);
  model->add(std::make_unique<Join>(first, JoinKind::add, true), at8);
  model->add(std::make_unique<Fork>(second, chain(layers(conv(8, 4, 1, false, 1)))), at8);
  model->add(conv(8, 8, 1, true), at8);
  model->add(std::make_unique<Join>(second, JoinKind::concat_side_last), at8);
  model->add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::global_avg}), {12, 6, 6});
  model->add(std::make_unique<Flatten>(), {12, 1, 1});
  model->add(std::make_unique<Dense>(DenseOptions{.in_features = 12, .out_features = 5}), {12});
  return model;
}

// A model cut into stages between forks and their joins (a side value crossing a cut, another passing a
// whole stage) computes the whole model's output and gradients, bit for bit, forward and backward
// twice over (the second step on the tensors the first gave back).
TEST(OpenBlock, StagesCutBetweenForksAndJoinsComputeTheWholeModel) {
  const dims_t in = {3, 3, 6, 6};
  const auto x_values = test::random_values(product(in), 21);
  const auto diff_values = test::random_values(3 * 5, 22);
  Context ctx;
  auto whole = two_blocks();
  whole->finalize(ctx);
  whole->initialize(7);
  Tensor x = test::from_plain(ctx, x_values, plain_desc(in));
  std::vector<float> output, input_grad;
  for (int step = 0; step < 2; ++step) {
    output = test::to_plain(ctx, whole->forward(ctx, x, Mode::train));
    whole->backward(ctx, test::from_plain(ctx, diff_values, whole->output_desc()));
  }
  EXPECT_DOUBLE_EQ(whole->side_bytes_after(2), 4.0 * 8 * 36);  // inside the first block
  EXPECT_DOUBLE_EQ(whole->side_bytes_after(4), 0.0);           // between the blocks
  EXPECT_DOUBLE_EQ(whole->side_bytes_after(5), 4.0 * 4 * 36);  // the second's side value, made

  for (const std::vector<std::size_t>& cuts : {std::vector<std::size_t>{0, 3, 11}, {0, 2, 4, 6, 11}, {0, 6, 11}}) {
    SCOPED_TRACE("cut at " + std::to_string(cuts[1]));
    std::vector<std::unique_ptr<Model>> stages;
    for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
      stages.push_back(two_blocks());
      stages.back()->keep_layers(cuts[s], cuts[s + 1]);
      stages.back()->finalize(ctx);
      stages.back()->initialize(7);
    }
    for (int step = 0; step < 2; ++step) {
      std::vector<Tensor> between;  // what each stage sends the next, as the trainer copies it
      const Tensor* value = &x;
      for (auto& stage : stages) {
        const Tensor& out = stage->forward(ctx, *value, Mode::train);
        between.push_back(test::from_plain(ctx, test::to_plain(ctx, out), plain_desc(out.dims())));
        value = &between.back();
      }
      EXPECT_EQ(test::to_plain(ctx, *value), output);
      std::vector<Tensor> gradients;
      gradients.push_back(test::from_plain(ctx, diff_values, stages.back()->output_desc()));
      for (std::size_t s = stages.size(); s-- > 0;) {
        const Tensor& g = stages[s]->backward(ctx, gradients.back());
        if (s > 0) gradients.push_back(test::from_plain(ctx, test::to_plain(ctx, g), plain_desc(g.dims())));
        stages[s]->release_input_gradient(ctx);
      }
    }
    for (const auto& stage : stages) {
      const auto grads = stage->grads();
      const auto whole_grads = whole->grads().subspan(stage->param_offset(), grads.size());
      EXPECT_EQ(std::memcmp(grads.data(), whole_grads.data(), grads.size() * sizeof(float)), 0);
    }
    // An evaluation's forward crosses the cuts alike.
    const Tensor* value = &x;
    std::vector<Tensor> between;
    for (auto& stage : stages) {
      const Tensor& out = stage->forward(ctx, *value, Mode::infer);
      between.push_back(test::from_plain(ctx, test::to_plain(ctx, out), plain_desc(out.dims())));
      value = &between.back();
    }
    EXPECT_EQ(test::to_plain(ctx, *value), test::to_plain(ctx, whole->forward(ctx, x, Mode::infer)));
  }
}

// Recomputed segments give back their layers' activations after forward, but not a Fork's input, which its
// Join reads in a later segment: the same gradients, bit for bit.
TEST(OpenBlock, RecomputedSegmentsKeepTheSideValues) {
  const dims_t in = {3, 3, 6, 6};
  const auto x_values = test::random_values(product(in), 31);
  const auto diff_values = test::random_values(3 * 5, 32);
  std::vector<std::vector<float>> grads;
  for (const bool recompute : {false, true}) {
    Context ctx;
    auto model = two_blocks();
    model->recompute_activations(recompute);
    model->finalize(ctx);
    model->initialize(7);
    Tensor x = test::from_plain(ctx, x_values, plain_desc(in));
    for (int step = 0; step < 2; ++step) {
      model->forward(ctx, x, Mode::train);
      model->backward(ctx, test::from_plain(ctx, diff_values, model->output_desc()));
    }
    grads.emplace_back(model->grads().begin(), model->grads().end());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

}  // namespace opened_blocks
}  // namespace
}  // namespace ddl
