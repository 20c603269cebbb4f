// Every layer's backward against central finite differences, including padding and stride edge cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/layers/batch_norm2d.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/pool2d.hpp"
#include "core/layers/relu.hpp"
#include "core/rng.hpp"
#include "tests/core/gradient_check.hpp"

namespace ddl {
namespace {

using test::check_gradients;
using test::GradientCheckOptions;

TEST(Conv2dGradient, Same3x3WithBias) {
  Conv2d conv({.in_channels = 3, .out_channels = 5, .kernel = 3, .stride = 1, .padding = 1});
  check_gradients(conv, {2, 3, 6, 6});
}

TEST(Conv2dGradient, Stride2NoPaddingOddSize) {
  Conv2d conv({.in_channels = 4, .out_channels = 6, .kernel = 3, .stride = 2, .padding = 0});
  check_gradients(conv, {2, 4, 7, 7});
}

TEST(Conv2dGradient, LargePaddingNoBias) {
  Conv2d conv({.in_channels = 2, .out_channels = 3, .kernel = 5, .stride = 1, .padding = 2, .bias = false});
  check_gradients(conv, {1, 2, 5, 5});
}

TEST(Conv2dGradient, Stride2Padding1Kernel1x1Blocked) {
  // 17 output channels: oneDNN pads blocked layouts to 16-multiples; padding must not leak into gradients.
  Conv2d conv({.in_channels = 16, .out_channels = 17, .kernel = 1, .stride = 2, .padding = 0});
  check_gradients(conv, {2, 16, 5, 5});
}

TEST(Conv2dGradient, FusedRelu) {
  Conv2d conv({.in_channels = 3, .out_channels = 4, .kernel = 3, .stride = 1, .padding = 1, .relu = true});
  check_gradients(conv, {2, 3, 5, 5}, {.step = 1e-3f, .abs_tolerance = 5e-3f});
}

TEST(Conv2dGradient, GroupedAndDilated) {
  Conv2d conv(
      {.in_channels = 4, .out_channels = 6, .kernel = 3, .stride = 1, .padding = 2, .dilation = 2, .groups = 2});
  check_gradients(conv, {2, 4, 6, 6});
}

TEST(Conv2dGradient, DepthwiseStride2) {  // MobileNet's: one filter a channel
  Conv2d conv({.in_channels = 5, .out_channels = 5, .kernel = 3, .stride = 2, .padding = 1, .groups = 5});
  check_gradients(conv, {2, 5, 7, 7});
  // 32 channels: oneDNN's blocked depthwise kernels
  Conv2d blocked(
      {.in_channels = 32, .out_channels = 32, .kernel = 3, .stride = 1, .padding = 1, .groups = 32, .bias = false});
  check_gradients(blocked, {4, 32, 8, 8});
}

// Groups and dilation, against the formula in conv2d.hpp computed here (a consistent backward of a wrong
// forward would pass the checks above).
TEST(Conv2dOutput, GroupsAndDilationMatchTheFormula) {
  const int C = 4, O = 6, G = 2, K = 3, D = 2, P = 1, S = 2, H = 7;
  Context ctx;
  Conv2d conv(
      {.in_channels = C, .out_channels = O, .kernel = K, .stride = S, .padding = P, .dilation = D, .groups = G});
  const std::size_t nw = std::size_t(O) * (C / G) * K * K;
  std::vector<float> params = test::random_values(nw + O, 3), grads(nw + O);
  conv.bind({{std::span(params).subspan(0, nw), std::span(grads).subspan(0, nw)},
             {std::span(params).subspan(nw, O), std::span(grads).subspan(nw, O)}},
            ctx);
  const auto out_md = conv.setup(ctx, plain_desc({1, C, H, H}), Mode::infer, false);
  const int W = (H + 2 * P - D * (K - 1) - 1) / S + 1;
  ASSERT_EQ(dims_of(out_md), (dims_t{1, O, W, W}));
  const std::vector<float> x = test::random_values(std::size_t(C) * H * H, 4);
  const std::vector<float> y =
      test::to_plain(ctx, conv.forward(ctx, test::from_plain(ctx, x, plain_desc({1, C, H, H}))));
  for (int o = 0; o < O; ++o)
    for (int yy = 0; yy < W; ++yy)
      for (int xx = 0; xx < W; ++xx) {
        double want = params[nw + o];
        const int g = o / (O / G);
        for (int c = 0; c < C / G; ++c)
          for (int i = 0; i < K; ++i)
            for (int j = 0; j < K; ++j) {
              const int row = yy * S + i * D - P, col = xx * S + j * D - P;
              if (row < 0 || row >= H || col < 0 || col >= H) continue;
              want += double(params[((std::size_t(o) * (C / G) + c) * K + i) * K + j]) *
                      x[(std::size_t(g * (C / G) + c) * H + row) * H + col];
            }
        EXPECT_NEAR(y[(std::size_t(o) * W + yy) * W + xx], want, 1e-4) << o << "," << yy << "," << xx;
      }
}

TEST(Conv2dShape, OutputSizeFollowsFormula) {
  Context ctx;
  Conv2d conv({.in_channels = 3, .out_channels = 8, .kernel = 3, .stride = 2, .padding = 1});
  AlignedBuffer<float> p(8 * 3 * 9 + 8), g(8 * 3 * 9 + 8);
  conv.bind(
      {{p.span().subspan(0, 216), g.span().subspan(0, 216)}, {p.span().subspan(216, 8), g.span().subspan(216, 8)}},
      ctx);
  EXPECT_EQ(dims_of(conv.setup(ctx, plain_desc({1, 3, 9, 9}), Mode::train, true)), (dims_t{1, 8, 5, 5}));
  EXPECT_THROW(conv.setup(ctx, plain_desc({1, 4, 9, 9}), Mode::train, true), InputError);
}

TEST(DenseGradient, WithBias) {
  Dense dense({.in_features = 12, .out_features = 7});
  check_gradients(dense, {3, 12});
}

TEST(DenseGradient, FusedReluNoBias) {
  Dense dense({.in_features = 20, .out_features = 33, .bias = false, .relu = true});
  check_gradients(dense, {4, 20}, {.step = 1e-3f, .abs_tolerance = 5e-3f});
}

TEST(DenseGradient, LargeLayerKeepsPlainWeights) {
  // 16 MB of f32 weights: from 4 MB on, the layer computes on the parameters' plain layout, not a copy.
  Dense dense({.in_features = 4096, .out_features = 1024, .relu = true});
  check_gradients(dense, {2, 4096}, {.step = 1e-3f, .abs_tolerance = 5e-3f, .param_scale = 0.05f});
}

TEST(ReluGradient, AwayFromTheKink) {
  Relu relu;
  check_gradients(relu, {2, 3, 4, 4}, {.step = 1e-3f});
}

TEST(MaxPoolGradient, Kernel2Stride2) {
  Pool2d pool({.kind = PoolKind::max, .kernel = 2, .stride = 2});
  check_gradients(pool, {2, 3, 6, 6}, {.step = 1e-3f});
}

TEST(MaxPoolGradient, OverlappingWindowsWithPadding) {
  Pool2d pool({.kind = PoolKind::max, .kernel = 3, .stride = 2, .padding = 1});
  check_gradients(pool, {1, 2, 7, 7}, {.step = 1e-3f});
}

TEST(AvgPoolGradient, IncludePadding) {
  Pool2d pool({.kind = PoolKind::avg_include_padding, .kernel = 3, .stride = 2, .padding = 1});
  check_gradients(pool, {2, 3, 5, 5});
}

TEST(AvgPoolGradient, ExcludePadding) {
  Pool2d pool({.kind = PoolKind::avg_exclude_padding, .kernel = 3, .stride = 1, .padding = 1});
  check_gradients(pool, {1, 2, 4, 4});
}

// ceil_mode (SqueezeNet's pools): 6 pixels, kernel 3, stride 2 give 3 windows, the last over pixels 4-5.
TEST(PoolCeilMode, LastWindowIsKeptAndItsGradientFlows) {
  for (PoolKind kind : {PoolKind::max, PoolKind::avg_exclude_padding}) {
    Pool2d pool({.kind = kind, .kernel = 3, .stride = 2, .padding = 0, .ceil_mode = true});
    SCOPED_TRACE(pool.describe());
    Context ctx;
    const auto out = pool.setup(ctx, plain_desc({1, 1, 6, 6}), Mode::infer, false);
    ASSERT_EQ(dims_of(out), (dims_t{1, 1, 3, 3}));
    std::vector<float> x(36);
    for (int i = 0; i < 36; ++i) x[i] = float(i);  // row r, column c holds 6r + c
    const auto y = test::to_plain(ctx, pool.forward(ctx, test::from_plain(ctx, x, plain_desc({1, 1, 6, 6}))));
    // The corner window covers rows and columns 4-5: max 35, mean of 28, 29, 34, 35.
    EXPECT_FLOAT_EQ(y[8], kind == PoolKind::max ? 35.0f : 31.5f);
    Pool2d again({.kind = kind, .kernel = 3, .stride = 2, .padding = 0, .ceil_mode = true});
    check_gradients(again, {2, 3, 6, 6});
  }
  // With padding 1, a window that would start in the right padding is dropped: 5 pixels give 3, not 4.
  Context ctx;
  Pool2d padded({.kind = PoolKind::max, .kernel = 2, .stride = 2, .padding = 1, .ceil_mode = true});
  EXPECT_EQ(dims_of(padded.setup(ctx, plain_desc({1, 1, 5, 5}), Mode::infer, false)), (dims_t{1, 1, 3, 3}));
  Pool2d counting({.kind = PoolKind::avg_include_padding, .kernel = 3, .stride = 2, .ceil_mode = true});
  EXPECT_THROW(counting.setup(ctx, plain_desc({1, 1, 6, 6}), Mode::infer, false), InputError);
}

TEST(GlobalAvgPoolGradient, WholePlane) {
  Pool2d pool({.kind = PoolKind::global_avg});
  check_gradients(pool, {2, 5, 3, 4});
}

// The maximum of each plane (PyTorch's AdaptiveMaxPool2d(1), exported as GlobalMaxPool): its gradient
// reaches the maximum only.
TEST(GlobalMaxPoolGradient, WholePlane) {
  Pool2d pool({.kind = PoolKind::global_max});
  check_gradients(pool, {2, 5, 3, 4});
  Context ctx;
  const auto md = plain_desc({1, 2, 2, 2});
  pool.setup(ctx, md, Mode::infer, false);
  const std::vector<float> y =
      test::to_plain(ctx, pool.forward(ctx, test::from_plain(ctx, {1, 5, -2, 3, -1, -4, -3, -2}, md)));
  EXPECT_EQ(y, (std::vector<float>{5, -1}));
}

TEST(FlattenGradient, FromPlain) {
  Flatten flatten;
  check_gradients(flatten, {2, 3, 4, 5});
}

TEST(DropoutGradient, MaskIsAppliedInBackward) {
  Dropout dropout(0.4f, 11);
  check_gradients(dropout, {4, 3, 5, 5});
}

TEST(BatchNorm2dGradient, TrainingStatistics) {
  BatchNorm2d bn({.channels = 3});
  check_gradients(bn, {4, 3, 3, 3}, {.step = 1e-2f, .abs_tolerance = 3e-3f, .rel_tolerance = 3e-2f});
}

TEST(BatchNorm2dGradient, FusedRelu) {
  BatchNorm2d bn({.channels = 3, .relu = true});
  check_gradients(bn, {4, 3, 3, 3}, {.step = 1e-3f, .abs_tolerance = 5e-3f, .rel_tolerance = 3e-2f});
}

TEST(BatchNorm2dGradient, OneAndThreeDimensionalInputs) {  // BatchNorm1d on [N, C] and [N, C, L]
  BatchNorm2d flat({.channels = 3}), tokens({.channels = 3});
  check_gradients(flat, {6, 3}, {.step = 1e-2f, .abs_tolerance = 3e-3f, .rel_tolerance = 3e-2f});
  check_gradients(tokens, {4, 3, 5}, {.step = 1e-2f, .abs_tolerance = 3e-3f, .rel_tolerance = 3e-2f});
}

// [64, 6, 256] as BatchNorm1d gets it after a flatten: y and dx within float32's rounding of the formulas worked
// in double (oneDNN's [N, C, L] kernel summed 30x less precisely, 3e-5 in y).
TEST(BatchNorm2dOutput, ThreeDimensionalInputWithinFloatRoundingOfTheFormula) {
  const int n = 64, c = 6, l = 256, size = n * c * l;
  Context ctx;
  BatchNorm2d bn({.channels = c});
  AlignedBuffer<float> p(2 * c), g(2 * c);
  for (int k = 0; k < c; ++k) p[k] = 1.0f + 0.1f * k;
  bn.bind({{p.span().subspan(0, c), g.span().subspan(0, c)}, {p.span().subspan(c, c), g.span().subspan(c, c)}}, ctx);
  bn.setup(ctx, plain_desc({n, c, l}), Mode::train, true);
  Tensor x(plain_desc({n, c, l}), ctx.engine()), dy(plain_desc({n, c, l}), ctx.engine());
  Rng rng(1);
  for (int i = 0; i < size; ++i) {
    x.data()[i] = std::max(0.0f, 0.5f + 0.3f * rng.normal());  // a ReLU's output
    dy.data()[i] = 0.3f * rng.normal();
  }
  const Tensor& out = bn.forward(ctx, x);
  const std::vector<float> y(out.data(), out.data() + size);
  const Tensor& dx = bn.backward(ctx, dy);
  double worst_y = 0, worst_dx = 0;
  for (int k = 0; k < c; ++k) {
    const auto at = [&](int b, int j) { return (b * c + k) * l + j; };
    double sum = 0, squares = 0, sum_g = 0, sum_gx = 0;
    for (int b = 0; b < n; ++b)
      for (int j = 0; j < l; ++j) sum += x.data()[at(b, j)];
    const double mean = sum / (n * l);
    for (int b = 0; b < n; ++b)
      for (int j = 0; j < l; ++j) squares += std::pow(x.data()[at(b, j)] - mean, 2);
    const double rstd = 1 / std::sqrt(squares / (n * l) + 1e-5);
    for (int b = 0; b < n; ++b)
      for (int j = 0; j < l; ++j) {
        const double normal = (x.data()[at(b, j)] - mean) * rstd;
        worst_y = std::max(worst_y, std::abs(p[k] * normal - y[at(b, j)]));
        sum_g += dy.data()[at(b, j)];
        sum_gx += dy.data()[at(b, j)] * normal;
      }
    for (int b = 0; b < n; ++b)
      for (int j = 0; j < l; ++j) {
        const double normal = (x.data()[at(b, j)] - mean) * rstd;
        const double want = p[k] * rstd * (dy.data()[at(b, j)] - (sum_g + normal * sum_gx) / (n * l));
        worst_dx = std::max(worst_dx, std::abs(want - dx.data()[at(b, j)]));
      }
  }
  EXPECT_LT(worst_y, 3e-6);
  EXPECT_LT(worst_dx, 3e-6);
}

}  // namespace
}  // namespace ddl

namespace ddl {
namespace {

// A ReLU whose backward is off by a factor: the checker must catch it, or it proves nothing.
class WrongRelu : public Relu {
 public:
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override {
    Tensor& out = const_cast<Tensor&>(Relu::backward(ctx, diff_dst));
    for (std::size_t i = 0; i < out.bytes() / sizeof(float); ++i) out.data()[i] *= 1.1f;
    return out;
  }
};

TEST(GradientChecker, DetectsAWrongBackward) {
  WrongRelu wrong;
  EXPECT_GT(check_gradients(wrong, {1, 2, 3, 3}, {.step = 1e-3f, .report = false}), 0u);
  Relu right;
  EXPECT_EQ(check_gradients(right, {1, 2, 3, 3}, {.step = 1e-3f}), 0u);
}

TEST(BatchNorm2d, RunningStatisticsFollowPyTorch) {
  Context ctx;
  BatchNorm2d bn({.channels = 1, .momentum = 0.1f});
  AlignedBuffer<float> p(2), g(2);
  p[0] = 1.0f;  // gamma
  bn.bind({{p.span().subspan(0, 1), g.span().subspan(0, 1)}, {p.span().subspan(1, 1), g.span().subspan(1, 1)}}, ctx);
  bn.setup(ctx, plain_desc({4, 1, 1, 1}), Mode::train, true);
  Tensor x = test::from_plain(ctx, {1, 2, 3, 6}, plain_desc({4, 1, 1, 1}));
  bn.forward(ctx, x);
  auto state = bn.state();
  // batch mean 3, biased var 3.5, unbiased 14/3
  EXPECT_NEAR(state[0].floats[0], 0.1f * 3.0f, 1e-6);
  EXPECT_NEAR(state[1].floats[0], 0.9f + 0.1f * 14.0f / 3.0f, 1e-5);
  // Inference uses the running statistics: y = (x - 0.3) / sqrt(running_var + eps).
  bn.setup(ctx, plain_desc({4, 1, 1, 1}), Mode::infer, false);
  auto y = test::to_plain(ctx, bn.forward(ctx, x));
  EXPECT_NEAR(y[3], (6.0f - 0.3f) / std::sqrt(state[1].floats[0] + 1e-5f), 1e-5);
}

TEST(Dropout, InferenceIsIdentityAndTrainingKeepsTheExpectation) {
  Context ctx;
  Dropout dropout(0.25f, 3);
  const dims_t dims = {8, 4, 16, 16};
  std::vector<float> ones(product(dims), 1.0f);
  dropout.setup(ctx, plain_desc(dims), Mode::infer, true);
  EXPECT_EQ(test::to_plain(ctx, dropout.forward(ctx, test::from_plain(ctx, ones, plain_desc(dims)))), ones);
  dropout.setup(ctx, plain_desc(dims), Mode::train, true);
  Tensor x = test::from_plain(ctx, ones, plain_desc(dims));
  auto y = test::to_plain(ctx, dropout.forward(ctx, x));
  double sum = 0;
  std::size_t zeros = 0;
  for (float v : y) {
    sum += v;
    zeros += v == 0.0f;
    if (v != 0.0f) {
      EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / y.size(), 0.25, 0.02);
  EXPECT_NEAR(sum / y.size(), 1.0, 0.03);
}

}  // namespace
}  // namespace ddl
