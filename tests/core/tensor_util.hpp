// Test helpers: move tensors between plain std::vector<float> and whatever layout a layer chose.
#pragma once

#include <vector>

#include "core/context.hpp"
#include "core/layers/relayout.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace ddl::test {

inline std::vector<float> to_plain(Context& ctx, const Tensor& t) {
  Tensor plain(plain_desc(t.dims()), ctx.engine());
  Copy(ctx, t.desc(), plain.desc())(ctx, t.memory(), plain.memory());
  return {plain.data(), plain.data() + plain.elements()};
}

inline Tensor from_plain(Context& ctx, const std::vector<float>& values, const dnnl::memory::desc& md) {
  Tensor plain(plain_desc(dims_of(md)), ctx.engine());
  std::copy(values.begin(), values.end(), plain.data());
  Tensor out(md, ctx.engine());
  Copy(ctx, plain.desc(), md)(ctx, plain.memory(), out.memory());
  return out;
}

inline std::vector<float> random_values(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

}  // namespace ddl::test
