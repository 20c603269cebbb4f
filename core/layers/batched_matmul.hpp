// C = alpha * A @ B over the last two axes, batched over the leading ones, on oneDNN's matmul; A, B and C
// may be strided views (a head's slice of a packed [N, T, 3, H, d] tensor, a transposed operand), which
// is how attention avoids copying heads in and out. Backward: dA = alpha * dC @ B^T, dB = alpha * A^T @ dC,
// each written with A's and B's own strides. With the context's compute type bf16, A and B are bf16
// (f32 ones go through plain bf16 copies) and C is written in its own type. Copies are leased for the call
// that makes them: none is kept from forward to backward (ViT-B/16's bf16 peak was twice its f32 one while
// each product kept its own).
#pragma once

#include <optional>

#include "core/context.hpp"
#include "core/layers/relayout.hpp"
#include "core/tensor.hpp"

namespace ddl {

// One product C = alpha * A @ B (+ bias) on oneDNN's matmul, or C += that where `accumulate`. With the
// context's compute type bf16, A and B are bf16 (f32 ones go through plain bf16 copies) and C is written in its
// own type. oneDNN's fast kernels refuse some strides (a transposed left operand or result: the weight
// gradient X^T dY written as W^T); such an operand goes through a plain buffer, since a memory-bound copy
// costs far less than the reference kernel that would run otherwise.
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
};

class BatchedMatmul {
 public:
  BatchedMatmul() = default;
  BatchedMatmul(Context& ctx, const dnnl::memory::desc& a, const dnnl::memory::desc& b, const dnnl::memory::desc& c,
                float alpha, bool with_backward, const dnnl::memory::desc& bias = {});

  // C = alpha * A @ B (+ bias, broadcast over rows, when built with one).
  void forward(Context& ctx, const dnnl::memory& a, const dnnl::memory& b, const dnnl::memory& c,
               const dnnl::memory& bias = {});
  // A null memory for da or db skips that gradient.
  void backward(Context& ctx, const dnnl::memory& a, const dnnl::memory& b, const dnnl::memory& dc,
                const dnnl::memory& da, const dnnl::memory& db);

  // The descriptor of the same memory seen with its last two axes swapped.
  static dnnl::memory::desc transposed(const dnnl::memory::desc& md);

 private:
  MatmulProduct fwd_;
  std::optional<MatmulProduct> bwd_a_, bwd_b_;
};

}  // namespace ddl
