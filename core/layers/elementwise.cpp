#include "core/layers/elementwise.hpp"

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

namespace {
dnnl::prop_kind forward_kind(Mode mode) {
  return mode == Mode::train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
}
}  // namespace

dnnl::memory::desc Eltwise::setup(Context& ctx, const dnnl::memory::desc& src_md, Mode mode, bool need_diff_src) {
  const auto fwd_pd = make_eltwise_forward_pd(ctx.engine(), forward_kind(mode), algorithm_, src_md, alpha_, beta_);
  fwd_ = dnnl::eltwise_forward(fwd_pd);
  reset_output(ctx, fwd_pd.dst_desc());
  bwd_.reset();
  if (mode == Mode::train && need_diff_src) {
    bwd_ = dnnl::eltwise_backward(
        make_eltwise_backward_pd(ctx.engine(), algorithm_, src_md, src_md, alpha_, beta_, fwd_pd));
    diff_src_.reset(src_md);
  }
  return output_.desc();
}

const Tensor& Eltwise::forward(Context& ctx, const Tensor& src) {
  src_ = &src;
  const Tensor& dst = output_.get(ctx);
  fwd_.execute(ctx.stream(), {{DNNL_ARG_SRC, src.memory()}, {DNNL_ARG_DST, dst.memory()}});
  return dst;
}

const Tensor& Eltwise::backward(Context& ctx, const Tensor& diff_dst) {
  if (bwd_)
    bwd_->execute(ctx.stream(), {{DNNL_ARG_SRC, src_->memory()},
                                 {DNNL_ARG_DIFF_DST, diff_dst.memory()},
                                 // The backward reads the source, not the output: it may take the output's storage.
                                 {DNNL_ARG_DIFF_SRC, diff_src_.get(ctx, output_).memory()}});
  return diff_src_.current();
}

dnnl::memory::desc Softmax::setup(Context& ctx, const dnnl::memory::desc& src_md, Mode mode, bool need_diff_src) {
  const int ndims = static_cast<int>(dims_of(src_md).size());
  if (axis_ < 0 || axis_ >= ndims)
    throw InputError(describe() + ": input " + to_string(dims_of(src_md)) + " has no such axis");
  const auto fwd_pd = make_softmax_forward_pd(ctx.engine(), forward_kind(mode), src_md, axis_);
  fwd_ = dnnl::softmax_forward(fwd_pd);
  reset_output(ctx, fwd_pd.dst_desc());
  bwd_.reset();
  if (mode == Mode::train && need_diff_src) {
    const auto& dst_md = output_.desc();
    bwd_ = dnnl::softmax_backward(make_softmax_backward_pd(ctx.engine(), dst_md, dst_md, axis_, fwd_pd));
    diff_src_.reset(dst_md);
  }
  return output_.desc();
}

const Tensor& Softmax::forward(Context& ctx, const Tensor& src) {
  const Tensor& dst = output_.get(ctx);
  fwd_.execute(ctx.stream(), {{DNNL_ARG_SRC, src.memory()}, {DNNL_ARG_DST, dst.memory()}});
  return dst;
}

const Tensor& Softmax::backward(Context& ctx, const Tensor& diff_dst) {
  if (bwd_)
    bwd_->execute(ctx.stream(), {{DNNL_ARG_DST, output_.current().memory()},
                                 {DNNL_ARG_DIFF_DST, diff_dst.memory()},
                                 {DNNL_ARG_DIFF_SRC, diff_src_.get(ctx).memory()}});
  return diff_src_.current();
}

}  // namespace ddl
