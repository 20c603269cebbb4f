// Mixed precision (Context::set_compute_type(bf16)): each layer that multiplies in bf16 gives, for the same
// weights and input, the f32 layer's output, input gradient and weight gradients within bf16's rounding,
// and not exactly them (so bf16 did run). bf16 keeps 8 significant bits: every input and weight is
// rounded by at most 2^-9 relative, and the f32 accumulation adds nothing comparable; over sums of a few
// hundred products of random signs the error stays below 1% of the largest value (measured: 0.2-0.5%).
// Without fused ReLUs: an output that rounding moves across zero switches its gradient on or off, a
// difference of the gradient's whole size that no tolerance of bf16's rounding covers.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <memory>

#include "core/bf16.hpp"
#include "core/cpu_bf16.hpp"
#include "core/layers/attention.hpp"
#include "core/layers/batch_norm2d.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/elementwise.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/layer_norm.hpp"
#include "core/layers/linear.hpp"
#include "core/layers/pool2d.hpp"
#include "core/layers/relu.hpp"
#include "core/layers/residual.hpp"
#include "core/layers/softmax_cross_entropy.hpp"
#include "tests/core/graph_builder.hpp"
#include "core/layers/tokens.hpp"
#include "core/model.hpp"
#include "tests/core/gradient_check.hpp"
#include "tests/core/tensor_util.hpp"

namespace ddl {
namespace {

constexpr double kBf16Tolerance = 1e-2;  // of the largest |value| of each result

struct Results {
  std::vector<float> output, input_gradient, weight_gradients;
};

// The types a layer takes and gives: f32 at a model's edges, bf16 between two layers that compute in bf16.
struct Sides {
  dt input = dt::f32, output = dt::f32;
};
constexpr Sides kBf16Between{dt::bf16, dt::bf16};

// exact_input: the input's values are bf16 values (truncated), the same in both precisions.
Results run(const std::function<std::unique_ptr<Layer>()>& make, const dims_t& input_dims, dt compute,
            Sides sides = {}, bool exact_input = false) {
  Context ctx;
  ctx.set_compute_type(compute);
  auto layer = make();
  layer->set_output_type(ctx, sides.output);
  const test::BoundParams bound(*layer, test::random_values(test::param_count(*layer), 11, -0.5f, 0.5f), ctx);
  const auto in_md = plain_desc(input_dims, sides.input);
  const auto out_md = layer->setup(ctx, in_md, Mode::train, true);
  EXPECT_EQ(data_type_of(out_md), sides.output) << layer->describe();
  std::vector<float> input_values = test::random_values(product(input_dims), 12);
  if (exact_input)
    for (float& v : input_values) v = std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) & 0xffff0000u);
  const Tensor input = test::from_plain(ctx, input_values, in_md);
  Results r;
  r.output = test::to_plain(ctx, layer->forward(ctx, input));
  const Tensor diff_dst = test::from_plain(ctx, test::random_values(product(dims_of(out_md)), 13), out_md);
  const Tensor& input_gradient = layer->backward(ctx, diff_dst);
  EXPECT_EQ(data_type_of(input_gradient.desc()), data_type_of(in_md)) << layer->describe();
  r.input_gradient = test::to_plain(ctx, input_gradient);
  r.weight_gradients = bound.gradients();
  return r;
}

void expect_close_but_not_equal(const std::vector<float>& bf16, const std::vector<float>& f32, const char* what) {
  ASSERT_EQ(bf16.size(), f32.size()) << what;
  double largest = 0, error = 0;
  for (std::size_t i = 0; i < f32.size(); ++i) {
    largest = std::max(largest, std::abs(static_cast<double>(f32[i])));
    error = std::max(error, std::abs(static_cast<double>(bf16[i]) - f32[i]));
  }
  EXPECT_GT(error, 0.0) << what << ": bf16 gave exactly the f32 result (did it run in bf16?)";
  EXPECT_LE(error, kBf16Tolerance * largest) << what << ": error " << error << ", largest " << largest;
}

// Where the CPU has no bf16 instructions ddl_train refuses bf16, and there is nothing to compare (not a
// skip: CI counts skips as failures, and the ISA query itself is checked below on every machine).
void expect_bf16_matches_f32(const std::function<std::unique_ptr<Layer>()>& make, const dims_t& input_dims,
                             Sides sides = {}) {
  if (!cpu_computes_bf16()) return;
  const Results f32 = run(make, input_dims, dt::f32), bf16 = run(make, input_dims, dt::bf16, sides);
  expect_close_but_not_equal(bf16.output, f32.output, "output");
  expect_close_but_not_equal(bf16.input_gradient, f32.input_gradient, "input gradient");
  if (!f32.weight_gradients.empty())
    expect_close_but_not_equal(bf16.weight_gradients, f32.weight_gradients, "weight gradients");
}

TEST(Bf16, TheIsaQueryAgreesWithTheKernelsCpuFlags) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line) && !line.starts_with("flags")) {
  }
  ASSERT_TRUE(line.starts_with("flags")) << "no flags line in /proc/cpuinfo";
  const bool flagged = line.find(" avx512_bf16") != std::string::npos || line.find(" amx_bf16") != std::string::npos;
  EXPECT_EQ(cpu_computes_bf16(), flagged) << line;
}

TEST(Bf16, Conv2dMatchesF32) {
  expect_bf16_matches_f32(
      [] {
        return std::make_unique<Conv2d>(
            Conv2dOptions{.in_channels = 16, .out_channels = 32, .kernel = 3, .padding = 1});
      },
      {4, 16, 12, 12});
}

TEST(Bf16, StridedConv2dWithoutBiasMatchesF32) {
  expect_bf16_matches_f32(
      [] {
        return std::make_unique<Conv2d>(
            Conv2dOptions{.in_channels = 3, .out_channels = 64, .kernel = 5, .stride = 2, .padding = 2, .bias = false});
      },
      {2, 3, 17, 17});
}

TEST(Bf16, DenseMatchesF32) {
  expect_bf16_matches_f32(
      [] { return std::make_unique<Dense>(DenseOptions{.in_features = 300, .out_features = 70}); },
      {8, 300});
}

// A million weights or more: the bf16 copy is plain, not blocked (it is converted every step).
TEST(Bf16, LargeDenseWithPlainWeightsMatchesF32) {
  expect_bf16_matches_f32(
      [] { return std::make_unique<Dense>(DenseOptions{.in_features = 1024, .out_features = 1024}); }, {4, 1024},
      kBf16Between);
}

TEST(Bf16, LinearOverTokensMatchesF32) {
  expect_bf16_matches_f32(
      [] { return std::make_unique<Linear>(LinearOptions{.in_features = 64, .out_features = 48}); }, {4, 10, 64});
}

// An imported graph's piece: nn.Linear's product by a weight read transposed with its bias, attention's
// products of two values and a softmax between them. Its products run in bf16, the rest in f32.
TEST(Bf16, GraphLayerProductsMatchF32) {
  expect_bf16_matches_f32(
      [] {
        test::GraphBuilder g({{"w", {24, 16}, Init::zeros}, {"b", {24}, Init::zeros}}, {});  // x [2, 5, 16]
        const int projected = g.add("MatMul", {0, 1, 2}, {{"ddl_transpose_b", test::ints({1})}});  // [2, 5, 24]
        const int turned = g.add("Transpose", {projected}, {{"perm", test::ints({0, 2, 1})}});  // [2, 24, 5]
        const int scores = g.add("Softmax", {g.add("MatMul", {projected, turned})}, {{"axis", test::ints({-1})}});
        g.add("MatMul", {scores, projected});  // [2, 5, 24]
        return g.make();
      },
      {2, 5, 16});
}

// Between two layers that take bf16 the activation and its gradient stay bf16: each such layer, given a
// bf16 input and asked for a bf16 output, still gives f32's results within bf16's rounding.
TEST(Bf16, Conv2dBetweenBf16LayersMatchesF32) {
  expect_bf16_matches_f32(
      [] {
        return std::make_unique<Conv2d>(
            Conv2dOptions{.in_channels = 16, .out_channels = 32, .kernel = 3, .padding = 1});
      },
      {4, 16, 12, 12}, kBf16Between);
}

TEST(Bf16, DenseBetweenBf16LayersMatchesF32) {
  expect_bf16_matches_f32(
      [] { return std::make_unique<Dense>(DenseOptions{.in_features = 300, .out_features = 70}); }, {8, 300},
      kBf16Between);
}

// Max pooling and ReLU compute nothing, they select: on inputs that bf16 holds exactly they select what
// f32 selects (rounding could otherwise tie two values of a pooling window, or move one across zero, and
// move the gradient), so the output equals f32's and the gradient differs only by the output gradient's
// rounding.
void expect_bf16_selects_as_f32(const std::function<std::unique_ptr<Layer>()>& make, const dims_t& input_dims) {
  if (!cpu_computes_bf16()) return;
  const Results f32 = run(make, input_dims, dt::f32, {}, true);
  const Results bf16 = run(make, input_dims, dt::bf16, kBf16Between, true);
  EXPECT_EQ(bf16.output, f32.output);
  expect_close_but_not_equal(bf16.input_gradient, f32.input_gradient, "input gradient");
}

TEST(Bf16, MaxPoolBetweenBf16LayersMatchesF32) {
  expect_bf16_selects_as_f32(
      [] { return std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 2, .stride = 2}); },
      {4, 16, 12, 12});
}

// Normalisation statistics, scale and shift stay f32; only the activations it reads and writes are bf16.
TEST(Bf16, BatchNormBetweenBf16LayersMatchesF32) {
  expect_bf16_matches_f32([] { return std::make_unique<BatchNorm2d>(BatchNorm2dOptions{.channels = 16}); },
                          {4, 16, 6, 6}, kBf16Between);
}

TEST(Bf16, ReluBetweenBf16LayersMatchesF32) {
  expect_bf16_selects_as_f32([] { return std::make_unique<Relu>(); }, {4, 16, 6, 6});
}

// A residual block between bf16 layers: its body, its shortcut and their sum all in bf16.
TEST(Bf16, ResidualBlockBetweenBf16LayersMatchesF32) {
  for (const bool identity : {true, false})
    expect_bf16_matches_f32(
        [identity] {
          Sequential body, shortcut;
          body.emplace<Conv2d>(Conv2dOptions{.in_channels = 16, .out_channels = 16, .kernel = 3, .padding = 1});
          body.emplace<BatchNorm2d>(BatchNorm2dOptions{.channels = 16});
          body.emplace<Conv2d>(Conv2dOptions{.in_channels = 16, .out_channels = 16, .kernel = 3, .padding = 1});
          if (!identity) shortcut.emplace<Conv2d>(Conv2dOptions{.in_channels = 16, .out_channels = 16, .kernel = 1});
          return std::make_unique<Residual>("block", std::move(body), std::move(shortcut));
        },
        {4, 16, 6, 6}, kBf16Between);
}

TEST(Bf16, FlattenBetweenBf16LayersMatchesF32) {
  expect_bf16_matches_f32([] { return std::make_unique<Flatten>(); }, {4, 16, 5, 5}, kBf16Between);
}

// A transformer's layers between its bf16 products: the linear layers, GELU, dropout and the attention
// take and give bf16; LayerNorm takes the f32 residual stream and gives bf16 to the linear layer after it.
TEST(Bf16, LinearBetweenBf16LayersMatchesF32) {
  expect_bf16_matches_f32(
      [] { return std::make_unique<Linear>(LinearOptions{.in_features = 64, .out_features = 48}); }, {4, 10, 64},
      kBf16Between);
}

TEST(Bf16, GeluBetweenBf16LayersMatchesF32) {
  expect_bf16_matches_f32([] { return std::make_unique<Gelu>(); }, {4, 10, 64}, kBf16Between);
}

TEST(Bf16, DropoutBetweenBf16LayersMatchesF32) {
  expect_bf16_matches_f32([] { return std::make_unique<Dropout>(0.25f, 7); }, {4, 10, 64}, kBf16Between);
}

TEST(Bf16, LayerNormGivesBf16MatchingF32) {
  expect_bf16_matches_f32([] { return std::make_unique<LayerNorm>(LayerNormOptions{.features = 64}); },
                          {4, 10, 64}, {dt::f32, dt::bf16});
}

TEST(Bf16, AttentionBetweenBf16LayersMatchesF32) {
  for (const float dropout : {0.0f, 0.1f})
    expect_bf16_matches_f32(
        [dropout] { return std::make_unique<ScaledDotProductAttention>(64, 4, dropout, 3); }, {2, 10, 3 * 64},
        kBf16Between);
}

// A whole encoder block, as ViT stacks them: f32 in and out (the residual stream), bf16 inside.
TEST(Bf16, TransformerEncoderBlockMatchesF32) {
  expect_bf16_matches_f32(
      [] {
        Sequential block;
        Sequential attention, mlp;
        attention.emplace<LayerNorm>(LayerNormOptions{.features = 64});
        attention.add(multi_head_self_attention(64, 4, 0.0f, 3));
        block.emplace<Residual>("attention", std::move(attention));
        mlp.emplace<LayerNorm>(LayerNormOptions{.features = 64});
        mlp.emplace<Linear>(LinearOptions{.in_features = 64, .out_features = 256});
        mlp.emplace<Gelu>();
        mlp.emplace<Linear>(LinearOptions{.in_features = 256, .out_features = 64});
        block.emplace<Residual>("mlp", std::move(mlp));
        return std::make_unique<Sequential>(std::move(block));
      },
      {2, 10, 64});
}

// A transformer's layers, one after another in a model: bf16 from each LayerNorm to the linear layer that
// ends its branch, f32 where the residual stream (LayerNorm's input) or the class token's layer takes it.
TEST(Bf16, TransformerLayersPassBf16BetweenThem) {
  if (!cpu_computes_bf16()) return;
  Context ctx;
  ctx.set_compute_type(dt::bf16);
  const int d = 16;
  Model model("tokens", {3, 8, 8}, 4);
  model.add(std::make_unique<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = d, .kernel = 4, .stride = 4}));
  model.add(std::make_unique<ImageToTokens>());
  model.add(std::make_unique<LayerNorm>(LayerNormOptions{.features = d}));
  model.add(multi_head_self_attention(d, 2, 0.1f, 3));
  model.add(std::make_unique<LayerNorm>(LayerNormOptions{.features = d}));
  model.add(std::make_unique<Linear>(LinearOptions{.in_features = d, .out_features = 4 * d}));
  model.add(std::make_unique<Gelu>());
  model.add(std::make_unique<Dropout>(0.1f, 5));
  model.add(std::make_unique<Linear>(LinearOptions{.in_features = 4 * d, .out_features = d}));
  model.add(std::make_unique<TakeClassToken>());
  model.add(std::make_unique<Linear>(LinearOptions{.in_features = d, .out_features = 4}));
  model.finalize(ctx);
  model.initialize(1);
  const dims_t dims = {2, 3, 8, 8};
  const Tensor x = test::from_plain(ctx, test::random_values(product(dims), 4), plain_desc(dims));
  SoftmaxCrossEntropy loss;
  const double value = loss.forward(ctx, model.forward(ctx, x, Mode::train), std::vector<std::int32_t>{1, 3}).loss;
  model.backward(ctx, loss.backward());
  std::vector<dt> types;
  for (const auto& md : model.output_descs()) types.push_back(data_type_of(md));
  const dt b = dt::bf16, f = dt::f32;
  // conv, tokens, norm, attention block (its last linear layer gives f32 to the norm), norm, linear, GELU,
  // dropout, linear, class token, logits.
  EXPECT_EQ(types, (std::vector<dt>{f, f, b, f, b, b, b, b, f, f, f}));
  EXPECT_TRUE(std::isfinite(value));
  double norm = 0;
  for (float g : model.grads()) norm += static_cast<double>(g) * g;
  EXPECT_GT(norm, 0.0);
}

// In a model the activations are bf16 exactly where both sides take bf16; the logits, which the loss
// takes, and the output of the layer before one that takes only f32 (LayerNorm here), stay f32. A
// LayerNorm gives bf16 to the dense layer after it. In f32 nothing changes. The convolution's ReLU
// backward runs in the max-pool after it, so no backward reads the convolution's output.
TEST(Bf16, ModelPassesBf16BetweenTheLayersThatTakeIt) {
  if (!cpu_computes_bf16()) return;
  for (const dt compute : {dt::f32, dt::bf16}) {
    Context ctx;
    ctx.set_compute_type(compute);
    Model model("chain", {3, 8, 8}, 4);
    model.add(std::make_unique<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 16, .kernel = 3, .padding = 1, .relu = true}));
    model.add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 2, .stride = 2}));
    model.add(std::make_unique<Flatten>());
    model.add(std::make_unique<Dense>(DenseOptions{.in_features = 16 * 16, .out_features = 32, .relu = true}));
    model.add(std::make_unique<LayerNorm>(LayerNormOptions{.features = 32}));
    model.add(std::make_unique<Dense>(DenseOptions{.in_features = 32, .out_features = 4}));
    model.finalize(ctx);
    model.initialize(1);
    const dims_t dims = {2, 3, 8, 8};
    const Tensor x = test::from_plain(ctx, test::random_values(product(dims), 4), plain_desc(dims));
    SoftmaxCrossEntropy loss;
    const std::vector<std::int32_t> labels = {1, 3};
    const double first = loss.forward(ctx, model.forward(ctx, x, Mode::train), labels).loss;
    model.backward(ctx, loss.backward());
    std::vector<dt> types;
    for (const auto& md : model.output_descs()) types.push_back(data_type_of(md));
    const dt between = compute;
    EXPECT_EQ(types, (std::vector<dt>{between, between, between, dt::f32, between, dt::f32}));
    EXPECT_FALSE(model.layer(0).backward_reads_output());
    EXPECT_TRUE(std::isfinite(first));
    double norm = 0;
    for (float g : model.grads()) norm += static_cast<double>(g) * g;
    EXPECT_GT(norm, 0.0) << "every gradient came back through the bf16 activations";
  }
}

// The model asks for bf16 images where its first layer takes them, and a step on bf16 images is the step
// on the f32 ones, which the convolution would round the same way.
TEST(Bf16, ModelTakesBf16ImagesAsTheF32OnesRounded) {
  if (!cpu_computes_bf16()) return;
  Context ctx;
  ctx.set_compute_type(dt::bf16);
  auto make = [&] {
    auto model = std::make_unique<Model>("chain", dims_t{3, 8, 8}, 4);
    model->add(std::make_unique<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 8, .kernel = 3, .padding = 1, .relu = true}));
    model->add(std::make_unique<Flatten>());
    model->add(std::make_unique<Dense>(DenseOptions{.in_features = 8 * 64, .out_features = 4}));
    model->finalize(ctx);
    model->initialize(1);
    return model;
  };
  auto on_f32 = make(), on_bf16 = make();
  EXPECT_EQ(on_bf16->input_type(ctx), dt::bf16);
  const dims_t dims = {2, 3, 8, 8};
  const Tensor x = test::from_plain(ctx, test::random_values(product(dims), 4), plain_desc(dims));
  Tensor x_bf16(plain_desc(dims, dt::bf16), ctx.engine());
  auto* h = static_cast<std::uint16_t*>(x_bf16.memory().get_data_handle());
  for (std::size_t k = 0; k < x.elements(); ++k) h[k] = to_bf16(x.data()[k]);
  SoftmaxCrossEntropy loss;
  const std::vector<std::int32_t> labels = {1, 3};
  const double a = loss.forward(ctx, on_f32->forward(ctx, x, Mode::train), labels).loss;
  on_f32->backward(ctx, loss.backward());
  const double b = loss.forward(ctx, on_bf16->forward(ctx, x_bf16, Mode::train), labels).loss;
  on_bf16->backward(ctx, loss.backward());
  EXPECT_EQ(a, b);
  EXPECT_TRUE(std::equal(on_f32->grads().begin(), on_f32->grads().end(), on_bf16->grads().begin()));
  // A model whose first layer takes only f32 asks for f32, and any model does in an f32 context.
  Model normed("normed", {3, 8, 8}, 4);
  normed.add(std::make_unique<Flatten>());
  normed.add(std::make_unique<LayerNorm>(LayerNormOptions{.features = 3 * 64}));
  normed.add(std::make_unique<Dense>(DenseOptions{.in_features = 3 * 64, .out_features = 4}));
  normed.finalize(ctx);
  EXPECT_EQ(normed.input_type(ctx), dt::f32);
  Context f32_ctx;
  EXPECT_EQ(make()->input_type(f32_ctx), dt::f32);
}

}  // namespace
}  // namespace ddl
