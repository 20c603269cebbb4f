// The one finite-difference checker every layer's test goes through (after Caffe's GradientChecker).
// The scalar checked is L = sum_i r_i * y_i for a fixed random r, so dL/dy = r is what backward gets.
// Analytic gradients w.r.t. the input and every parameter are compared with central differences
// (L(x + h) - L(x - h)) / 2h on a sample of elements; layer state (dropout's generator) is restored
// before every forward so each evaluation sees the same function.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/layers/layer.hpp"
#include "tests/core/tensor_util.hpp"

namespace ddl::test {

struct GradientCheckOptions {
  float step = 1e-2f;
  float abs_tolerance = 2e-3f;
  float rel_tolerance = 2e-2f;
  std::size_t samples = 60;  // elements checked per array (all when fewer)
  bool check_input = true;
  float param_scale = 0.5f;
  bool report = true;  // add a test failure for each mismatch
};

// A layer's parameters, with the given values, and their gradients, held here and bound to the layer.
struct BoundParams {
  AlignedBuffer<float> params, grads;
  BoundParams(Layer& layer, const std::vector<float>& values, Context& ctx)
      : params(values.size()), grads(values.size()) {
    std::copy(values.begin(), values.end(), params.data());
    std::vector<ParamView> views;
    std::size_t offset = 0;
    for (const auto& spec : layer.param_specs()) {
      const std::size_t n = product(spec.dims);
      views.push_back({params.span().subspan(offset, n), grads.span().subspan(offset, n)});
      offset += n;
    }
    EXPECT_EQ(offset, values.size());
    layer.bind(views, ctx);
  }
  std::vector<float> gradients() const { return {grads.data(), grads.data() + grads.span().size()}; }
};

// The number of a layer's parameter values.
inline std::size_t param_count(const Layer& layer) {
  std::size_t total = 0;
  for (const auto& s : layer.param_specs()) total += product(s.dims);
  return total;
}

// Returns the number of mismatching elements.
inline std::size_t check_gradients(Layer& layer, const dims_t& input_dims, const GradientCheckOptions& opt = {},
                                   std::uint64_t seed = 7) {
  Context ctx;
  const std::size_t total = param_count(layer);
  BoundParams bound(layer, random_values(total, seed + 1, -opt.param_scale, opt.param_scale), ctx);

  const auto in_md = plain_desc(input_dims);
  const auto out_md = layer.setup(ctx, in_md, Mode::train, true);
  std::vector<float> x = random_values(product(input_dims), seed + 2);
  const std::vector<float> r = random_values(product(dims_of(out_md)), seed + 3);

  // Saved state, restored before each forward.
  std::vector<std::vector<float>> saved_floats;
  std::vector<std::vector<std::uint64_t>> saved_words;
  for (auto& s : layer.state()) {
    saved_floats.emplace_back(s.floats.begin(), s.floats.end());
    saved_words.emplace_back(s.words.begin(), s.words.end());
  }
  auto restore = [&] {
    auto states = layer.state();
    for (std::size_t i = 0; i < states.size(); ++i) {
      std::copy(saved_floats[i].begin(), saved_floats[i].end(), states[i].floats.begin());
      std::copy(saved_words[i].begin(), saved_words[i].end(), states[i].words.begin());
    }
  };
  auto loss = [&]() {
    restore();
    Tensor input = from_plain(ctx, x, in_md);
    const auto y = to_plain(ctx, layer.forward(ctx, input));
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += static_cast<double>(r[i]) * y[i];
    return l;
  };

  restore();
  Tensor input = from_plain(ctx, x, in_md);
  const Tensor& y = layer.forward(ctx, input);
  Tensor diff_dst = from_plain(ctx, r, y.desc());
  const Tensor& diff_src = layer.backward(ctx, diff_dst);
  const std::vector<float> analytic_input = opt.check_input ? to_plain(ctx, diff_src) : std::vector<float>();
  layer.release_gradient(ctx);  // as a caller must before the next forward
  const std::vector<float> analytic_params = bound.gradients();

  std::size_t mismatches = 0;
  auto compare = [&](std::vector<float>& values, float* live, const std::vector<float>& analytic,
                     const std::string& what) {
    const std::size_t n = values.size();
    const std::size_t stride = std::max<std::size_t>(1, n / opt.samples);
    for (std::size_t i = (seed % stride); i < n; i += stride) {
      const float original = live ? live[i] : values[i];
      auto set = [&](float v) { (live ? live[i] : values[i]) = v; };
      set(original + opt.step);
      const double up = loss();
      set(original - opt.step);
      const double down = loss();
      set(original);
      const double numeric = (up - down) / (2.0 * opt.step);
      const double tolerance = opt.abs_tolerance + opt.rel_tolerance * std::abs(numeric);
      if (std::abs(analytic[i] - numeric) <= tolerance) continue;
      ++mismatches;
      if (opt.report)
        ADD_FAILURE() << layer.describe() << ": d/d " << what << "[" << i << "] analytic " << analytic[i]
                      << ", numeric " << numeric << ", tolerance " << tolerance;
    }
  };
  if (opt.check_input) compare(x, nullptr, analytic_input, "input");
  std::vector<float> unused(total);
  if (total) compare(unused, bound.params.data(), analytic_params, "params");
  return mismatches;
}

}  // namespace ddl::test
