// A ReLU fused into a convolution or dense primitive as a post-op: the forward attribute, and the backward
// dL/dpre = dL/dy where y > 0, computed from the saved output y (no pre-activation copy is kept).
#pragma once

#include <optional>

#include "core/context.hpp"
#include "core/onednn_api.hpp"
#include "core/tensor.hpp"

namespace ddl {

inline dnnl::primitive_attr relu_post_op(bool relu) {
  dnnl::primitive_attr attr;
  if (relu) {
    dnnl::post_ops ops;
    append_eltwise(ops, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

// The gradient it returns lives in the context's scratch block (valid until another layer's backward runs)
// unless `keep` asks for a buffer of its own: a residual block's gradient must outlive its body's backward.
class FusedReluBackward {
 public:
  enum class Storage { scratch, keep };
  FusedReluBackward() = default;
  FusedReluBackward(Context& ctx, const dnnl::memory::desc& dst_md, Storage storage = Storage::scratch)
      : md_(dst_md) {
    if (storage == Storage::keep)
      diff_pre_ = Tensor(dst_md, ctx.engine());
    else
      ctx.reserve_scratch(dst_md.get_size());
    const auto alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    const auto hint = make_eltwise_forward_pd(ctx.engine(), dnnl::prop_kind::forward_training, alg, dst_md);
    backward_ = dnnl::eltwise_backward(make_eltwise_backward_pd(ctx.engine(), alg, dst_md, dst_md, 0.0f, 0.0f, hint));
  }

  // The gradient before the ReLU, or diff_dst itself when no ReLU is fused.
  const dnnl::memory& operator()(Context& ctx, const dnnl::memory& dst, const dnnl::memory& diff_dst) {
    if (!backward_) return diff_dst;
    out_ = diff_pre_.empty() ? dnnl::memory(md_, ctx.engine(), ctx.scratch()) : diff_pre_.memory();
    backward_->execute(ctx.stream(), {{DNNL_ARG_DST, dst}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, out_}});
    return out_;
  }
  // Needs Storage::keep.
  const Tensor& operator()(Context& ctx, const Tensor& dst, const Tensor& diff_dst) {
    if (!backward_) return diff_dst;
    (*this)(ctx, dst.memory(), diff_dst.memory());
    return diff_pre_;
  }

 private:
  std::optional<dnnl::eltwise_backward> backward_;
  dnnl::memory::desc md_;
  Tensor diff_pre_;
  dnnl::memory out_;
};

}  // namespace ddl
