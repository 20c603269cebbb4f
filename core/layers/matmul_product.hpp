// One product C = alpha * A @ B (+ bias) on oneDNN's matmul, or C += that where `accumulate`. With the
// context's compute type bf16, A and B are bf16 (f32 ones go through plain bf16 copies) and C is written in its
// own type. oneDNN's fast kernels refuse some strides (a transposed left operand or result: the weight
// gradient X^T dY written as W^T); such an operand goes through a plain buffer, since a memory-bound copy
// costs far less than the reference kernel that would run otherwise.
#pragma once

#include <optional>

#include "core/context.hpp"
#include "core/layers/relayout.hpp"
#include "core/tensor.hpp"

namespace ddl {

class MatmulProduct {
 public:
  MatmulProduct() = default;
  MatmulProduct(Context& ctx, const dnnl::memory::desc& a, const dnnl::memory::desc& b, const dnnl::memory::desc& c,
                float alpha, const dnnl::memory::desc& bias = {}, bool accumulate = false);
  void operator()(Context& ctx, const dnnl::memory& a, const dnnl::memory& b, const dnnl::memory& c,
                  const dnnl::memory& bias = {});

 private:
  dnnl::matmul matmul_;
  LeasedCopy a_, b_;
  std::optional<Copy> c_;
  dnnl::memory::desc c_md_;  // of the plain buffer C is computed in, when c_ copies (or adds) it out
  dnnl::memory::desc scratchpad_md_;
};

}  // namespace ddl
