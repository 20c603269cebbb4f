#include "core/layers/layer_norm.hpp"

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

using memory = dnnl::memory;
using flags = dnnl::normalization_flags;

LayerNorm::LayerNorm(const LayerNormOptions& options) : opt_(options) {
  if (opt_.features <= 0) throw InputError("layer_norm: features must be positive");
}

std::vector<ParamSpec> LayerNorm::param_specs() const {
  return {{"gamma", {opt_.features}, Init::ones}, {"beta", {opt_.features}, Init::zeros}};
}

void LayerNorm::bind(const std::vector<ParamView>& views, Context& ctx) {
  memory::desc md({opt_.features}, dt::f32, tag::x);
  scale_ = ParamMemory(views[0], md, ctx.engine());
  shift_ = ParamMemory(views[1], md, ctx.engine());
}

memory::desc LayerNorm::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool /*need_diff_src*/) {
  const dims_t in = dims_of(src_md);
  if (in.size() < 2 || in.back() != opt_.features)
    throw InputError(describe() + ": expects input [..., " + std::to_string(opt_.features) + "], got " +
                     to_string(in));
  mode_ = mode;
  const auto f = flags::use_scale | flags::use_shift;
  const auto prop = mode == Mode::train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const auto fwd_pd =
      make_normalization_forward_pd<dnnl::layer_normalization_forward>(ctx.engine(), prop, src_md, opt_.epsilon, f);
  fwd_ = dnnl::layer_normalization_forward(fwd_pd);
  normalized_md_ = fwd_pd.dst_desc();
  const memory::desc out_md = output_type_ == dt::f32 ? normalized_md_ : plain_desc(in, output_type_);
  to_output_type_.reset();
  diff_to_f32_.reset();
  if (out_md != normalized_md_) to_output_type_ = Copy(ctx, normalized_md_, out_md);
  reset_output(ctx, out_md);
  mean_ = Tensor(fwd_pd.mean_desc(), ctx.engine());
  variance_ = Tensor(fwd_pd.variance_desc(), ctx.engine());
  bwd_.reset();
  if (mode == Mode::infer) return out_md;
  const auto bwd_pd = make_normalization_backward_pd<dnnl::layer_normalization_backward>(
      ctx.engine(), dnnl::prop_kind::backward, src_md, src_md, opt_.epsilon, f, fwd_pd);
  bwd_ = dnnl::layer_normalization_backward(bwd_pd);
  if (to_output_type_) diff_to_f32_ = Copy(ctx, out_md, normalized_md_);
  diff_src_.reset(bwd_pd.diff_src_desc());
  return out_md;
}

const Tensor& LayerNorm::forward(Context& ctx, const Tensor& src) {
  src_ = &src;
  const Tensor& dst = output_.get(ctx);
  Tensor normalized = to_output_type_ ? ctx.lease(normalized_md_) : Tensor();
  fwd_.execute(ctx.stream(), {{DNNL_ARG_SRC, src.memory()},
                              {DNNL_ARG_SCALE, scale_.value},
                              {DNNL_ARG_SHIFT, shift_.value},
                              {DNNL_ARG_MEAN, mean_.memory()},
                              {DNNL_ARG_VARIANCE, variance_.memory()},
                              {DNNL_ARG_DST, to_output_type_ ? normalized.memory() : dst.memory()}});
  if (to_output_type_) {
    (*to_output_type_)(ctx, normalized.memory(), dst.memory());
    ctx.give_back(normalized);
  }
  return dst;
}

const Tensor& LayerNorm::backward(Context& ctx, const Tensor& diff_dst) {
  if (!bwd_) throw Error(describe() + ": backward called on a layer set up for inference");
  Tensor diff_f32 = diff_to_f32_ ? ctx.lease(normalized_md_) : Tensor();
  if (diff_to_f32_) (*diff_to_f32_)(ctx, diff_dst.memory(), diff_f32.memory());
  bwd_->execute(ctx.stream(), {{DNNL_ARG_SRC, src_->memory()},
                               {DNNL_ARG_DIFF_DST, diff_to_f32_ ? diff_f32.memory() : diff_dst.memory()},
                               {DNNL_ARG_SCALE, scale_.value},
                               {DNNL_ARG_SHIFT, shift_.value},
                               {DNNL_ARG_MEAN, mean_.memory()},
                               {DNNL_ARG_VARIANCE, variance_.memory()},
                               {DNNL_ARG_DIFF_SRC, diff_src_.get(ctx).memory()},
                               {DNNL_ARG_DIFF_SCALE, scale_.grad},
                               {DNNL_ARG_DIFF_SHIFT, shift_.grad}});
  if (diff_to_f32_) ctx.give_back(diff_f32);
  return diff_src_.current();
}

}  // namespace ddl
