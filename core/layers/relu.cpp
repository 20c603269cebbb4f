#include "core/layers/relu.hpp"

#include "core/onednn_api.hpp"

namespace ddl {

dnnl::memory::desc Relu::setup(Context& ctx, const dnnl::memory::desc& src_md, Mode mode, bool need_diff_src) {
  const auto alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
  auto prop = mode == Mode::train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const auto fwd_pd = make_eltwise_forward_pd(ctx.engine(), prop, alg, src_md, 0.0f, 0.0f);
  fwd_ = dnnl::eltwise_forward(fwd_pd);
  reset_output(ctx, fwd_pd.dst_desc());
  bwd_.reset();
  if (mode == Mode::train && need_diff_src) {
    const auto bwd_pd = make_eltwise_backward_pd(ctx.engine(), alg, src_md, src_md, 0.0f, 0.0f, fwd_pd);
    bwd_ = dnnl::eltwise_backward(bwd_pd);
    diff_src_.reset(src_md);
  }
  return output_.desc();
}

const Tensor& Relu::forward(Context& ctx, const Tensor& src) {
  const Tensor& dst = output_.get(ctx);
  fwd_.execute(ctx.stream(), {{DNNL_ARG_SRC, src.memory()}, {DNNL_ARG_DST, dst.memory()}});
  return dst;
}

const Tensor& Relu::backward(Context& ctx, const Tensor& diff_dst) {
  if (bwd_)
    bwd_->execute(ctx.stream(), {{DNNL_ARG_DST, output_.current().memory()},
                                 {DNNL_ARG_DIFF_DST, diff_dst.memory()},
                                 {DNNL_ARG_DIFF_SRC, diff_src_.get(ctx).memory()}});
  return diff_src_.current();
}

}  // namespace ddl
