// A ReLU fused into a convolution or dense primitive as a post-op: the forward attribute, and the backward
// dL/dpre = dL/dy where y > 0, computed from the saved output y (no pre-activation copy is kept). A max-pool
// after a convolution runs the same backward on its own output (move_relu_backward_into_pools).
#pragma once

#include <optional>

#include "core/context.hpp"
#include "core/error.hpp"
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

// Where the gradient it returns lives: in the context's scratch block (valid until another layer's
// backward runs); in a buffer leased until release() (a residual block's gradient must outlive its body's
// backward, but not the block's); or in diff_dst itself, where the layer may overwrite that (see
// Layer::set_may_overwrite_diff_dst), which needs no buffer at all.
class FusedReluBackward {
 public:
  enum class Storage { scratch, lease, in_place };
  FusedReluBackward() = default;
  FusedReluBackward(Context& ctx, const dnnl::memory::desc& dst_md, Storage storage = Storage::scratch)
      : md_(dst_md), storage_(storage) {
    if (storage == Storage::scratch) ctx.reserve_scratch(dst_md.get_size());
    const auto alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    const auto hint = make_eltwise_forward_pd(ctx.engine(), dnnl::prop_kind::forward_training, alg, dst_md);
    backward_ = dnnl::eltwise_backward(make_eltwise_backward_pd(ctx.engine(), alg, dst_md, dst_md, 0.0f, 0.0f, hint));
  }
  // Scratch or in place, by what the layer may do with its diff_dst.
  FusedReluBackward(Context& ctx, const dnnl::memory::desc& dst_md, bool may_overwrite_diff_dst)
      : FusedReluBackward(ctx, dst_md, may_overwrite_diff_dst ? Storage::in_place : Storage::scratch) {}

  // The gradient before the ReLU, or diff_dst itself when no ReLU is fused.
  const dnnl::memory& operator()(Context& ctx, const dnnl::memory& dst, const dnnl::memory& diff_dst) {
    if (!backward_) return diff_dst;
    out_ = target(ctx, diff_dst);
    backward_->execute(ctx.stream(), {{DNNL_ARG_DST, dst}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, out_}});
    return out_;
  }
  // The same as a tensor: not for Storage::scratch, whose block is no tensor.
  const Tensor& operator()(Context& ctx, const Tensor& dst, const Tensor& diff_dst) {
    if (!backward_) return diff_dst;
    if (storage_ == Storage::scratch)
      throw Error("fused ReLU backward: a tensor result needs a leased or in-place gradient");
    (*this)(ctx, dst.memory(), diff_dst.memory());
    return storage_ == Storage::in_place ? diff_dst : diff_pre_;
  }
  void release(Context& ctx) {
    if (!diff_pre_.empty()) ctx.give_back(diff_pre_);
  }

 private:
  dnnl::memory target(Context& ctx, const dnnl::memory& diff_dst) {
    switch (storage_) {
      case Storage::in_place:
        return diff_dst;
      case Storage::lease:
        if (diff_pre_.empty()) diff_pre_ = ctx.lease(md_);
        return diff_pre_.memory();
      case Storage::scratch:
        break;
    }
    return dnnl::memory(md_, ctx.engine(), ctx.scratch());
  }

  std::optional<dnnl::eltwise_backward> backward_;
  dnnl::memory::desc md_;
  Storage storage_ = Storage::scratch;
  Tensor diff_pre_;
  dnnl::memory out_;
};

}  // namespace ddl
