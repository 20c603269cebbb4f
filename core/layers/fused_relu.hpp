// A ReLU fused into a convolution or dense primitive as a post-op: the forward attribute, and the backward
// dL/dpre = dL/dy where y > 0, computed from the saved output y (no pre-activation copy is kept).
#pragma once

#include <optional>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace ddl {

inline dnnl::primitive_attr relu_post_op(bool relu) {
  dnnl::primitive_attr attr;
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

class FusedReluBackward {
 public:
  FusedReluBackward() = default;
  explicit FusedReluBackward(Context& ctx, const dnnl::memory::desc& dst_md) : diff_pre_(dst_md, ctx.engine()) {
    const auto alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    dnnl::eltwise_forward::primitive_desc hint(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, dst_md, 0.0f, 0.0f), ctx.engine());
    backward_ = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
        dnnl::eltwise_backward::desc(alg, dst_md, dst_md, 0.0f, 0.0f), ctx.engine(), hint));
  }

  // The gradient before the ReLU, or diff_dst itself when no ReLU is fused.
  const dnnl::memory& operator()(Context& ctx, const dnnl::memory& dst, const dnnl::memory& diff_dst) {
    if (!backward_) return diff_dst;
    backward_->execute(ctx.stream(),
                       {{DNNL_ARG_DST, dst}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_pre_.memory()}});
    return diff_pre_.memory();
  }
  const Tensor& operator()(Context& ctx, const Tensor& dst, const Tensor& diff_dst) {
    if (!backward_) return diff_dst;
    (*this)(ctx, dst.memory(), diff_dst.memory());
    return diff_pre_;
  }

 private:
  std::optional<dnnl::eltwise_backward> backward_;
  Tensor diff_pre_;
};

}  // namespace ddl
