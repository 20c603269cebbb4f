// Loops over N-d tensors for the graph's operators: each element of a tensor of some dims, in row-major
// order, with its offset into other tensors read under given strides (broadcast, transposed, sliced).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>

#include "core/context.hpp"
#include "core/graph/shape_rules.hpp"
#include "core/tensor.hpp"

namespace ddl::walk {

using dim = std::int64_t;

// Tensors from this many elements are walked by every OpenMP thread, each taking whole rows.
inline constexpr std::size_t kParallelFrom = std::size_t{1} << 14;

// Calls fn(o, a, b) for each element of `dims` in row-major order: o its row-major offset, a and b its
// offsets under the strides sa and sb.
template <class F>
void each(const dims_t& dims, const dims_t& sa, const dims_t& sb, F&& fn) {
  const std::size_t n = product(dims);
  if (n == 0) return;
  if (dims.empty()) {
    fn(std::size_t{0}, dim{0}, dim{0});
    return;
  }
  const std::size_t last = dims.size() - 1;
  dims_t at(dims.size(), 0);
  dim a = 0, b = 0;
  for (std::size_t o = 0; o < n;) {
    for (dim k = 0; k < dims[last]; ++k, ++o) fn(o, a + k * sa[last], b + k * sb[last]);
    for (std::size_t d = last; d-- > 0;) {
      a += sa[d];
      b += sb[d];
      if (++at[d] < dims[d]) break;
      a -= sa[d] * dims[d];
      b -= sb[d] * dims[d];
      at[d] = 0;
    }
  }
}

// `each`, with the rows (the elements along the last axis) shared among the OpenMP threads: for an fn that
// writes only at o, or at an offset that no other element writes (a transpose's, a slice's).
template <class F>
void in_parallel(const dims_t& dims, const dims_t& sa, const dims_t& sb, F&& fn) {
  const std::size_t n = product(dims);
  if (n < kParallelFrom || dims.empty()) return each(dims, sa, sb, fn);
  const std::size_t last = dims.size() - 1;
  const dim cols = dims[last], rows = static_cast<dim>(n) / cols;
#pragma omp parallel for
  for (dim r = 0; r < rows; ++r) {
    dim a = 0, b = 0, rest = r;
    for (std::size_t d = last; d-- > 0;) {
      const dim at = rest % dims[d];
      rest /= dims[d];
      a += at * sa[d];
      b += at * sb[d];
    }
    const std::size_t o = static_cast<std::size_t>(r * cols);
    for (dim k = 0; k < cols; ++k) fn(o + k, a + k * sa[last], b + k * sb[last]);
  }
}

// to[i] += from[i], by every OpenMP thread where there are many; nothing where `to` is null.
inline void add_into(float* to, const float* from, std::size_t n) {
  if (!to) return;
#pragma omp parallel for if (n >= kParallelFrom)
  for (std::size_t i = 0; i < n; ++i) to[i] += from[i];
}

// A oneDNN memory over a value's numbers.
inline dnnl::memory over(const dnnl::memory::desc& md, Context& ctx, const float* data) {
  return dnnl::memory(md, ctx.engine(), const_cast<float*>(data));
}

inline dnnl::memory::desc strided(const dims_t& dims, const dims_t& strides) {
  return dnnl::memory::desc(dims, dt::f32, strides);
}
inline dnnl::memory::desc plain(const dims_t& dims) { return strided(dims, shapes::strides_of(dims)); }
// The value as one row of numbers, for element-wise primitives.
inline dnnl::memory::desc flat(const dims_t& dims) {
  return strided({static_cast<dim>(std::max<std::size_t>(product(dims), 1))}, {1});
}

}  // namespace ddl::walk
