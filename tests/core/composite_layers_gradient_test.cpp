// Finite-difference checks of the blocks and transformer layers: residual, gate, concat, linear, layer norm,
// GELU and the other element-wise functions, softmax, batched matmul, attention and the token layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.hpp"
#include "core/layers/attention.hpp"
#include "core/cpu_bf16.hpp"
#include "core/layers/batch_norm2d.hpp"
#include "core/layers/channel_shuffle.hpp"
#include "core/layers/channel_slice.hpp"
#include "core/layers/concat.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/elementwise.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/gate.hpp"
#include "core/layers/layer_norm.hpp"
#include "core/layers/linear.hpp"
#include "core/layers/matmul_product.hpp"
#include "core/layers/pad2d.hpp"
#include "core/layers/pool2d.hpp"
#include "core/layers/relu.hpp"
#include "core/layers/residual.hpp"
#include "core/layers/tokens.hpp"
#include "tests/core/gradient_check.hpp"

namespace ddl {
namespace {

using test::check_gradients;
using test::GradientCheckOptions;

// ReLUs make the loss piecewise linear: a small step keeps both sides of the difference on one piece.
const GradientCheckOptions kPiecewise = {.step = 1e-3f, .abs_tolerance = 5e-3f};

Sequential conv_body(int in, int out, int stride, bool relu) {
  Sequential s;
  s.emplace<Conv2d>(Conv2dOptions{.in_channels = in, .out_channels = out, .kernel = 3, .stride = stride,
                                  .padding = 1, .relu = relu});
  return s;
}

TEST(ResidualGradient, IdentityShortcutWithReluAfterTheSum) {
  Sequential body = conv_body(4, 4, 1, true);
  body.emplace<Conv2d>(Conv2dOptions{.in_channels = 4, .out_channels = 4, .kernel = 3, .padding = 1});
  Residual block("block", std::move(body), Sequential(), true);
  check_gradients(block, {2, 4, 5, 5}, kPiecewise);
}

// A body ending in a BatchNorm, whose backward does not read its output: the sum overwrites that output
// (with the ReLU too where no channel padding is involved: 16 channels).
TEST(ResidualGradient, SumWrittenOverABodyEndingInBatchNorm) {
  for (int channels : {16, 4}) {
    Sequential body = conv_body(channels, channels, 1, true);
    body.emplace<Conv2d>(Conv2dOptions{.in_channels = channels, .out_channels = channels, .kernel = 3, .padding = 1});
    body.emplace<BatchNorm2d>(BatchNorm2dOptions{.channels = channels});
    Residual block("block", std::move(body), Sequential(), true);
    SCOPED_TRACE(std::to_string(channels) + " channels");
    check_gradients(block, {2, channels, 5, 5}, {.step = 1e-3f, .abs_tolerance = 5e-3f, .rel_tolerance = 3e-2f});
  }
}

// A transformer's MLP block: the sum is written over the last linear layer's output, which its backward
// does not read.
TEST(ResidualGradient, TransformerMlpBlockSumsOverItsLastLinearOutput) {
  Sequential mlp;
  mlp.emplace<LayerNorm>(LayerNormOptions{.features = 6});
  mlp.emplace<Linear>(LinearOptions{.in_features = 6, .out_features = 12});
  mlp.emplace<Gelu>();
  mlp.emplace<Linear>(LinearOptions{.in_features = 12, .out_features = 6});
  Residual block("mlp", std::move(mlp));
  check_gradients(block, {2, 5, 6}, {.step = 1e-3f, .abs_tolerance = 3e-3f, .rel_tolerance = 3e-2f});
}

// A BatchNorm's output before a max-pool is given back once the pool has read it: neither backward reads it.
TEST(SequentialGradient, BatchNormOutputGivenBackAfterTheMaxPoolRead) {
  Sequential chain;
  chain.emplace<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 8, .kernel = 3, .padding = 1});
  chain.emplace<BatchNorm2d>(BatchNorm2dOptions{.channels = 8, .relu = true});
  chain.emplace<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 2, .stride = 2});
  chain.emplace<Conv2d>(Conv2dOptions{.in_channels = 8, .out_channels = 4, .kernel = 3, .padding = 1});
  check_gradients(chain, {2, 3, 6, 6}, {.step = 1e-3f, .abs_tolerance = 5e-3f, .rel_tolerance = 3e-2f});
}

// A convolution's ReLU before a max-pool: the pool applies the ReLU's backward to its own output gradient,
// with windows apart (2/2) and overlapping (3/2, AlexNet's), and the convolution's output, which no
// backward reads then, is given back once the pool has read it. Mid-chain the pool gates the gradient it
// receives in place; last, in a buffer of its own (the caller's gradient is not its to overwrite).
TEST(SequentialGradient, ReluBackwardMovedIntoALastMaxPool) {
  Sequential chain;
  chain.emplace<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 8, .kernel = 3, .padding = 1, .relu = true});
  chain.emplace<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 3, .stride = 2});
  check_gradients(chain, {2, 3, 7, 7}, kPiecewise);
  EXPECT_FALSE(chain.parts()[0]->backward_reads_output());
}

TEST(SequentialGradient, ReluBackwardMovedIntoTheMaxPool) {
  for (const auto& [kernel, stride] : {std::pair{2, 2}, std::pair{3, 2}}) {
    Sequential chain;
    chain.emplace<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 8, .kernel = 3, .padding = 1, .relu = true});
    chain.emplace<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = kernel, .stride = stride});
    chain.emplace<Conv2d>(Conv2dOptions{.in_channels = 8, .out_channels = 4, .kernel = 3, .padding = 1, .relu = true});
    SCOPED_TRACE("kernel " + std::to_string(kernel) + " stride " + std::to_string(stride));
    check_gradients(chain, {2, 3, 7, 7}, kPiecewise);
    EXPECT_FALSE(chain.parts()[0]->backward_reads_output());
    EXPECT_TRUE(chain.parts()[1]->backward_reads_output());
    EXPECT_TRUE(chain.parts()[2]->backward_reads_output()) << "no pool after it: its ReLU backward stays";
  }
}

TEST(ResidualGradient, ProjectionShortcutWithStride) {
  Sequential shortcut;
  shortcut.emplace<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 5, .kernel = 1, .stride = 2});
  shortcut.emplace<BatchNorm2d>(BatchNorm2dOptions{.channels = 5});
  Residual block("down", conv_body(3, 5, 2, false), std::move(shortcut));
  check_gradients(block, {4, 3, 6, 6}, {.abs_tolerance = 3e-3f, .rel_tolerance = 3e-2f});
}

// Inside a chain a block may overwrite its gradient (its ReLU works in place), but its body may not: the
// identity path reads the same gradient after the body, whose last convolution here has a ReLU of its own.
// The first convolution gives the block its input in the body's output layout, so that the identity path
// takes the gradient itself, not a relaid copy.
TEST(ResidualGradient, InsideAChainWithABodyEndingInARelu) {
  Sequential chain;
  chain.emplace<Conv2d>(Conv2dOptions{.in_channels = 4, .out_channels = 4, .kernel = 3, .padding = 1});
  chain.emplace<Residual>("block", conv_body(4, 4, 1, true), Sequential(), true);
  chain.emplace<Conv2d>(Conv2dOptions{.in_channels = 4, .out_channels = 3, .kernel = 3, .padding = 1});
  check_gradients(chain, {2, 4, 5, 5}, kPiecewise);
}

TEST(ResidualGradient, ShapeMismatchIsAnError) {
  Context ctx;
  Residual block("bad", conv_body(3, 5, 2, false));
  AlignedBuffer<float> p(5 * 3 * 9 + 5), g(5 * 3 * 9 + 5);
  block.bind({{p.span().subspan(0, 135), g.span().subspan(0, 135)}, {p.span().subspan(135), g.span().subspan(135)}},
             ctx);
  EXPECT_THROW(block.setup(ctx, plain_desc({1, 3, 6, 6}), Mode::train, true), Error);
}

TEST(ConcatGradient, ThreeBranchesAlongChannels) {
  std::vector<Sequential> branches;
  branches.push_back(conv_body(3, 4, 1, false));
  branches.emplace_back().emplace<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 2, .kernel = 1});
  branches.emplace_back().emplace<Pool2d>(Pool2dOptions{.kind = PoolKind::avg_exclude_padding, .kernel = 3,
                                                        .stride = 1, .padding = 1});
  Concat concat("mixed", std::move(branches));
  check_gradients(concat, {2, 3, 5, 5});
}

TEST(ConcatGradient, IdentityBranchAsInDenseNet) {  // [x, f(x)]: the input itself is the first part
  std::vector<Sequential> branches(1);
  branches.push_back(conv_body(3, 4, 1, false));
  Concat concat("dense layer", std::move(branches));
  check_gradients(concat, {2, 3, 5, 5});
}

TEST(ConcatGradient, DenseLayersInTheConvolutionsBlockedLayout) {
  // Channels in whole blocks: where the convolution's output is channel-blocked, so is the concatenation,
  // and the next dense layer's identity part and convolution read it so.
  Sequential block;
  for (const int in : {16, 32}) {
    std::vector<Sequential> branches(1);
    branches.push_back(conv_body(in, 16, 1, false));
    block.emplace<Concat>("dense layer", std::move(branches));
  }
  check_gradients(block, {2, 16, 4, 4});

  const auto output_is_plain = [](Layer& layer, const dims_t& out) {
    Context ctx;
    test::BoundParams bound(layer, std::vector<float>(test::param_count(layer)), ctx);
    return layer.setup(ctx, plain_desc({2, 16, 4, 4}), Mode::train, true) == plain_desc(out);
  };
  Sequential conv = conv_body(16, 16, 1, true);
  std::vector<Sequential> branches(1);
  branches.push_back(conv_body(16, 16, 1, true));
  Concat concat("dense layer", std::move(branches));
  if (output_is_plain(conv, {2, 16, 4, 4})) GTEST_SKIP() << "oneDNN chose the plain layout here: nothing blocked";
  EXPECT_FALSE(output_is_plain(concat, {2, 32, 4, 4}));
}

// ShuffleNet's block: a channel split, one half through a convolution, the halves concatenated and shuffled.
// Plain, and after a convolution whose output oneDNN may block by 16 or 8 channels: halves of 16 channels
// are sub-tensors of a block of 16, halves of 12 are not (read through a plain copy).
TEST(ChannelSliceGradient, ShuffleNetsSplitAndShuffle) {
  for (const int channels : {6, 24, 32}) {
    const int half = channels / 2;
    Sequential block = conv_body(3, channels, 1, false);
    std::vector<Sequential> branches(2);
    branches[0].emplace<ChannelSlice>(0, half);
    branches[1].emplace<ChannelSlice>(half, channels);
    branches[1].emplace<Conv2d>(Conv2dOptions{.in_channels = half, .out_channels = half, .kernel = 1});
    block.emplace<Concat>("shufflenet block", std::move(branches));
    block.emplace<ChannelShuffle>(2);
    SCOPED_TRACE(std::to_string(channels) + " channels");
    check_gradients(block, {2, 3, 4, 4});
  }
  ChannelSlice alone(1, 4);
  check_gradients(alone, {2, 5, 3, 3});
}

// The values, against PyTorch's definitions: x[:, 1:4] and
// x.view(N, g, C / g, H, W).transpose(1, 2).reshape(N, C, H, W).
TEST(ChannelSliceGradient, ValuesAsPyTorchDefinesThem) {
  Context ctx;
  const dims_t dims = {2, 6, 2, 1};
  const std::vector<float> x = test::random_values(product(dims), 5);
  const auto md = plain_desc(dims);
  const Tensor src = test::from_plain(ctx, x, md);
  ChannelSlice slice(1, 4);
  slice.setup(ctx, md, Mode::infer, false);
  const std::vector<float> sliced = test::to_plain(ctx, slice.forward(ctx, src));
  ChannelShuffle shuffle(3);
  shuffle.setup(ctx, md, Mode::infer, false);
  const std::vector<float> shuffled = test::to_plain(ctx, shuffle.forward(ctx, src));
  const std::int64_t plane = 2, groups = 3, per_group = 2;
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t p = 0; p < plane; ++p) {
      for (std::int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(sliced[(n * 3 + c) * plane + p], x[(n * 6 + c + 1) * plane + p]);
      for (std::int64_t g = 0; g < groups; ++g)
        for (std::int64_t k = 0; k < per_group; ++k)
          EXPECT_EQ(shuffled[(n * 6 + k * groups + g) * plane + p], x[(n * 6 + g * per_group + k) * plane + p]);
    }
  EXPECT_THROW(ChannelShuffle(4).setup(ctx, md, Mode::infer, false), InputError);
  EXPECT_THROW(ChannelSlice(6, 8).setup(ctx, md, Mode::infer, false), InputError);
  EXPECT_EQ(dims_of(ChannelSlice(4, 7).setup(ctx, md, Mode::infer, false)), (dims_t{2, 2, 2, 1}));  // as ONNX clamps
}

// Uneven padding with a value, on a plain input; zeros around a convolution's (maybe blocked) output, then
// a convolution that reads the padded image.
TEST(Pad2dGradient, UnevenSidesPlainAndAfterAConvolution) {
  Pad2d uneven({.top = 1, .left = 0, .bottom = 2, .right = 3, .value = 0.5f});
  check_gradients(uneven, {2, 3, 4, 5});
  for (const int channels : {16, 12}) {  // 12: a blocked layout's last block half padding, which stays zero
    Sequential chain = conv_body(3, channels, 1, false);
    chain.emplace<Pad2d>(Pad2dOptions{.top = 0, .left = 1, .bottom = 1, .right = 0});
    chain.emplace<Conv2d>(Conv2dOptions{.in_channels = channels, .out_channels = 4, .kernel = 2});
    SCOPED_TRACE(std::to_string(channels) + " channels");
    check_gradients(chain, {2, 3, 4, 4});
  }
  Context ctx;
  Pad2d huge({.top = 1 << 25});
  EXPECT_THROW(huge.setup(ctx, plain_desc({1, 3, 4, 4}), Mode::infer, false), InputError);
  Pad2d wide_window({.same_kernel = 1 << 24, .same_dilation = 1 << 24});
  EXPECT_THROW(wide_window.setup(ctx, plain_desc({1, 3, 4, 4}), Mode::infer, false), InputError);
}

// auto_pad SAME: ceil(size / stride) outputs. A 3-wide window of stride 2 over 6 needs 1 more column: at the
// end (upper) or at the start (lower); over 5, one on each side.
TEST(Pad2dGradient, SameUpperAndLower) {
  Context ctx;
  for (const bool lower : {false, true}) {
    Pad2d same({.same_kernel = 3, .same_stride = 2, .same_lower = lower});
    EXPECT_EQ(dims_of(same.setup(ctx, plain_desc({1, 2, 5, 6}), Mode::infer, false)), (dims_t{1, 2, 7, 7}));
    const std::vector<float> x = test::random_values(60, 3);
    const std::vector<float> y = test::to_plain(ctx, same.forward(ctx, test::from_plain(ctx, x, plain_desc({1, 2, 5, 6}))));
    // Row 1 of channel 1 holds input row 0; its first column is padding where lower.
    EXPECT_EQ(y[49 + 7 + (lower ? 1 : 0)], x[30]);
    EXPECT_EQ(y[49 + 7 + (lower ? 0 : 6)], 0.0f);
    check_gradients(same, {2, 2, 5, 6});
  }
}

TEST(LinearGradient, TokensWithBias) {
  Linear linear({.in_features = 6, .out_features = 5});
  check_gradients(linear, {2, 4, 6});
}

TEST(LinearGradient, BatchNoBias) {
  Linear linear({.in_features = 9, .out_features = 3, .bias = false});
  check_gradients(linear, {5, 9});
}

TEST(LinearGradient, AfterABlockedConvolutionOutput) {
  Sequential s = conv_body(3, 16, 1, false);  // 16 channels: oneDNN picks a blocked layout here
  s.emplace<Linear>(LinearOptions{.in_features = 4, .out_features = 3});
  check_gradients(s, {2, 3, 4, 4});
}

TEST(LayerNormGradient, LastAxis) {
  LayerNorm norm({.features = 8});
  check_gradients(norm, {2, 3, 8}, {.abs_tolerance = 3e-3f, .rel_tolerance = 3e-2f});
}

// A squeeze-and-excitation gate, after a convolution whose blocked layout the factors broadcast over.
TEST(GateGradient, SqueezeAndExcitation) {
  Sequential path;
  path.emplace<Pool2d>(Pool2dOptions{.kind = PoolKind::global_avg});
  path.emplace<Conv2d>(Conv2dOptions{.in_channels = 16, .out_channels = 4, .kernel = 1, .relu = true});
  path.emplace<Conv2d>(Conv2dOptions{.in_channels = 4, .out_channels = 16, .kernel = 1});
  path.emplace<Eltwise>("sigmoid", dnnl::algorithm::eltwise_logistic);
  Sequential chain = conv_body(3, 16, 1, false);
  chain.emplace<Gate>("gate", std::move(path));
  check_gradients(chain, {2, 3, 5, 5}, kPiecewise);
}

// SiLU, x * sigmoid(x): a factor an element, after a blocked convolution (the same layout) and on a plain
// input through a 1x1 convolution (the path's output in another layout than src's).
TEST(GateGradient, ElementFactorsAsSiLU) {
  Sequential silu;
  silu.emplace<Eltwise>("sigmoid", dnnl::algorithm::eltwise_logistic);
  Sequential chain = conv_body(3, 16, 1, false);
  chain.emplace<Gate>("silu", std::move(silu));
  check_gradients(chain, {2, 3, 5, 5});
  Sequential conv;
  conv.emplace<Conv2d>(Conv2dOptions{.in_channels = 16, .out_channels = 16, .kernel = 1});
  Gate gate("gate by a convolution", std::move(conv));
  check_gradients(gate, {2, 16, 4, 4});
}

// At 1x1 pixels (MobileNet-V3's last blocks at 32x32) the factors a channel are a factor an element.
TEST(GateGradient, SqueezeAndExcitationOnOnePixel) {
  Sequential path;
  path.emplace<Pool2d>(Pool2dOptions{.kind = PoolKind::global_avg});
  path.emplace<Conv2d>(Conv2dOptions{.in_channels = 16, .out_channels = 16, .kernel = 1});
  path.emplace<Eltwise>("sigmoid", dnnl::algorithm::eltwise_logistic);
  Gate gate("gate", std::move(path));
  check_gradients(gate, {2, 16, 1, 1});
}

// One factor an image, [N, 1, 1, 1] (stochastic depth's mask as exported), after a blocked convolution.
TEST(GateGradient, OneFactorAnImage) {
  Sequential path;
  path.emplace<Pool2d>(Pool2dOptions{.kind = PoolKind::global_avg});
  path.emplace<Conv2d>(Conv2dOptions{.in_channels = 16, .out_channels = 1, .kernel = 1});
  path.emplace<Eltwise>("sigmoid", dnnl::algorithm::eltwise_logistic);
  Sequential chain = conv_body(3, 16, 1, false);
  chain.emplace<Gate>("gate", std::move(path));
  check_gradients(chain, {2, 3, 5, 5}, kPiecewise);
}

TEST(GateGradient, PathOfAnotherShapeIsAnError) {
  Sequential path;
  path.emplace<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 2, .stride = 2});
  Gate gate("bad", std::move(path));
  Context ctx;
  EXPECT_THROW(gate.setup(ctx, plain_desc({2, 4, 6, 6}), Mode::train, true), InputError);
}

// The functions imported graphs use, each at points away from its kinks.
TEST(EltwiseGradient, SigmoidTanhLeakyReluClipHardSwishSiLU) {
  using dnnl::algorithm;
  const std::pair<const char*, std::function<std::unique_ptr<Layer>()>> functions[] = {
      {"sigmoid", [] { return std::make_unique<Eltwise>("sigmoid", algorithm::eltwise_logistic); }},
      {"tanh", [] { return std::make_unique<Eltwise>("tanh", algorithm::eltwise_tanh); }},
      {"leaky relu", [] { return std::make_unique<Eltwise>("leaky relu", algorithm::eltwise_relu, 0.1f); }},
      {"clip", [] { return std::make_unique<Eltwise>("clip", algorithm::eltwise_clip_v2, -0.5f, 0.5f); }},
      {"hard swish",
       [] { return std::make_unique<Eltwise>("hard swish", algorithm::eltwise_hardswish, 1.0f / 6, 0.5f); }},
      {"silu", [] { return std::make_unique<Eltwise>("silu", algorithm::eltwise_swish, 1.0f); }},
  };
  for (const auto& [name, make] : functions) {
    SCOPED_TRACE(name);
    auto layer = make();
    check_gradients(*layer, {2, 3, 4, 4}, kPiecewise);
  }
}

// Their values, against the formulas PyTorch uses (a wrong alpha or beta gives a consistent gradient too).
TEST(EltwiseOutput, MatchesTheFormulas) {
  using dnnl::algorithm;
  const std::vector<float> xs = {-4.0f, -1.5f, -0.25f, 0.0f, 0.5f, 2.0f, 5.0f};
  struct Case {
    Eltwise layer;
    std::function<float(float)> formula;
  } cases[] = {
      {Eltwise("sigmoid", algorithm::eltwise_logistic), [](float x) { return 1 / (1 + std::exp(-x)); }},
      {Eltwise("hard swish", algorithm::eltwise_hardswish, 1.0f / 6, 0.5f),
       [](float x) { return x * std::min(std::max(x / 6 + 0.5f, 0.0f), 1.0f); }},
      {Eltwise("silu", algorithm::eltwise_swish, 1.0f), [](float x) { return x / (1 + std::exp(-x)); }},
      {Eltwise("leaky relu", algorithm::eltwise_relu, 0.1f), [](float x) { return x > 0 ? x : 0.1f * x; }},
      {Eltwise("relu6", algorithm::eltwise_clip_v2, 0.0f, 6.0f),
       [](float x) { return std::min(std::max(x, 0.0f), 6.0f); }},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.layer.describe());
    Context ctx;
    const auto md = plain_desc({1, 1, 1, static_cast<dnnl::memory::dim>(xs.size())});
    c.layer.setup(ctx, md, Mode::infer, false);
    Tensor x(md, ctx.engine());
    std::copy(xs.begin(), xs.end(), x.data());
    const Tensor& y = c.layer.forward(ctx, x);
    for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(y.data()[i], c.formula(xs[i]), 1e-6f) << xs[i];
  }
}

TEST(GeluGradient, Exact) {
  Gelu gelu;
  check_gradients(gelu, {2, 5, 7}, {.step = 1e-3f});
}

TEST(SoftmaxGradient, MiddleAndLastAxis) {
  Softmax middle(1), last(2);
  check_gradients(middle, {2, 5, 3});
  check_gradients(last, {3, 2, 6});
}

// A batched matmul as a layer for the checker: input A [B, M, K] times a parameter B [B, K, N].
class MatmulProbe : public Layer {
 public:
  std::string describe() const override { return "batched matmul probe"; }
  std::vector<ParamSpec> param_specs() const override { return {{"b", {3, 4, 5}, Init::zeros}}; }
  void bind(const std::vector<ParamView>& views, Context& ctx) override {
    b_ = ParamMemory(views[0], plain_desc({3, 4, 5}), ctx.engine());
  }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode, bool) override {
    dst_ = Tensor(plain_desc({3, 2, 5}), ctx.engine());
    diff_src_ = Tensor(src, ctx.engine());
    op_ = BatchedMatmul(ctx, src, b_.value.get_desc(), dst_.desc(), 0.5f, true);
    return dst_.desc();
  }
  const Tensor& forward(Context& ctx, const Tensor& src) override {
    src_ = &src;
    op_.forward(ctx, src.memory(), b_.value, dst_.memory());
    return dst_;
  }
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override {
    op_.backward(ctx, src_->memory(), b_.value, diff_dst.memory(), diff_src_.memory(), b_.grad);
    return diff_src_;
  }

 private:
  ParamMemory b_;
  BatchedMatmul op_;
  Tensor dst_, diff_src_;
  const Tensor* src_ = nullptr;
};

TEST(BatchedMatmulGradient, BothOperandsScaled) {
  MatmulProbe probe;
  check_gradients(probe, {3, 2, 4});
}

// C += 0.5 A B, twice, from a C that is not zero: written in place (plain C) and through a plain buffer (C
// stored transposed, which oneDNN's fast kernels refuse to write), in f32 and, where the CPU has it, bf16.
TEST(MatmulProduct, AddsIntoItsResultInEveryLayout) {
  const std::vector<float> a = test::random_values(12, 1), b = test::random_values(20, 2), c0 = test::random_values(15, 3);
  const auto a_md = plain_desc({3, 4}), b_md = plain_desc({4, 5});
  for (const dt compute : {dt::f32, dt::bf16}) {
    if (compute == dt::bf16 && !cpu_computes_bf16()) continue;
    for (const bool transposed : {false, true}) {
      SCOPED_TRACE(std::string(compute == dt::bf16 ? "bf16" : "f32") + (transposed ? ", C transposed" : ""));
      Context ctx;
      ctx.set_compute_type(compute);
      const auto c_md = transposed ? dnnl::memory::desc({3, 5}, dt::f32, dims_t{1, 3}) : plain_desc({3, 5});
      MatmulProduct product(ctx, a_md, b_md, c_md, 0.5f, {}, true);
      std::vector<float> av = a, bv = b, c(15);
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j) c[transposed ? j * 3 + i : i * 5 + j] = c0[i * 5 + j];
      for (int call = 0; call < 2; ++call)
        product(ctx, dnnl::memory(a_md, ctx.engine(), av.data()), dnnl::memory(b_md, ctx.engine(), bv.data()),
                dnnl::memory(c_md, ctx.engine(), c.data()));
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j) {
          double ab = 0;
          for (int k = 0; k < 4; ++k) ab += double(a[i * 4 + k]) * b[k * 5 + j];
          EXPECT_NEAR(c[transposed ? j * 3 + i : i * 5 + j], c0[i * 5 + j] + ab, compute == dt::bf16 ? 3e-2 : 1e-5);
        }
    }
  }
}

TEST(AttentionGradient, TwoHeadsNoDropout) {
  ScaledDotProductAttention attention(8, 2, 0.0f, 1);
  check_gradients(attention, {2, 5, 24});
}

TEST(AttentionGradient, WithAttentionDropout) {
  ScaledDotProductAttention attention(6, 3, 0.3f, 5);
  check_gradients(attention, {2, 4, 18});
}

TEST(AttentionGradient, MultiHeadSelfAttentionWithProjections) {
  auto mhsa = multi_head_self_attention(8, 4, 0.0f, 1);
  check_gradients(*mhsa, {2, 3, 8});
}

TEST(AttentionOutput, OneHeadEqualsTheFormula) {
  // T = 2, D = 1: softmax over the two scores q_i k_j, weights times v.
  Context ctx;
  ScaledDotProductAttention attention(1, 1, 0.0f, 1);
  attention.setup(ctx, plain_desc({1, 2, 3}), Mode::infer, false);
  const std::vector<float> qkv = {1.0f, 2.0f, 10.0f, 0.5f, -1.0f, 20.0f};  // token 0: q k v, token 1: q k v
  auto out = test::to_plain(ctx, attention.forward(ctx, test::from_plain(ctx, qkv, plain_desc({1, 2, 3}))));
  for (int i = 0; i < 2; ++i) {
    const float q = qkv[i * 3], s0 = q * 2.0f, s1 = q * -1.0f;
    const float w0 = std::exp(s0) / (std::exp(s0) + std::exp(s1));
    EXPECT_NEAR(out[i], w0 * 10.0f + (1 - w0) * 20.0f, 1e-4);
  }
}

TEST(TokensGradient, ImageToTokensFromABlockedLayout) {
  Sequential s = conv_body(3, 16, 2, false);
  s.emplace<ImageToTokens>();
  check_gradients(s, {2, 3, 4, 4});
}

TEST(TokensGradient, ClassTokenAndPosition) {
  ClassTokenAndPosition embed(4, 3);
  check_gradients(embed, {2, 4, 3});
}

TEST(TokensGradient, TakeClassToken) {
  TakeClassToken take;
  check_gradients(take, {3, 4, 5});
}

}  // namespace
}  // namespace ddl
