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
#include "core/layers/matmul_product.hpp"
#include "core/tensor.hpp"

namespace ddl {

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
