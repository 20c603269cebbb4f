#include "core/layers/dense.hpp"

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

using memory = dnnl::memory;

Dense::Dense(const DenseOptions& options) : opt_(options) {
  if (opt_.in_features <= 0 || opt_.out_features <= 0) throw InputError("dense: feature counts must be positive");
}

std::string Dense::describe() const {
  return "dense " + std::to_string(opt_.in_features) + "->" + std::to_string(opt_.out_features) +
         (opt_.relu ? " +relu" : "");
}

std::vector<ParamSpec> Dense::param_specs() const {
  std::vector<ParamSpec> specs{{"weight",
                                {opt_.out_features, opt_.in_features},
                                opt_.init,
                                static_cast<std::size_t>(opt_.in_features),
                                static_cast<std::size_t>(opt_.out_features)}};
  if (opt_.bias) specs.push_back({"bias", {opt_.out_features}, Init::zeros});
  return specs;
}

void Dense::bind(const std::vector<ParamView>& views, Context& ctx) {
  weights_ = ParamMemory(views[0], memory::desc({opt_.out_features, opt_.in_features}, dt::f32, tag::oi), ctx.engine());
  if (opt_.bias) bias_ = ParamMemory(views[1], memory::desc({opt_.out_features}, dt::f32, tag::x), ctx.engine());
}

memory::desc Dense::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src_md);
  if (in.size() != 2 || in[1] != opt_.in_features)
    throw InputError(describe() + ": expects input [N, " + std::to_string(opt_.in_features) + "], got " +
                     to_string(in));
  if (src_md != plain_desc(in, data_type_of(src_md))) throw Error(describe() + ": expects a plain [N, I] input");
  mode_ = mode;
  const memory::desc dst_md = plain_desc({in[0], opt_.out_features}, output_type_);
  // In bf16 the products' inputs (source, weights, output gradient) are bf16; they write the output in
  // the type the next layer takes, and the input gradient in the input's type.
  const dt compute = ctx.compute_type();
  const memory::desc src_c(in, compute, tag::ab), diff_dst_c({in[0], opt_.out_features}, compute, tag::ab);
  // The weight gradients, and a large layer's weights, stay in the parameters' plain OI layout (in bf16:
  // a plain bf16 copy): a blocked copy would add a weight-sized buffer (VGG16's first dense layer alone
  // holds 411 MB) and measured no slower there, since such a step is bound by reading the weights (AlexNet's
  // bf16 step even went 0.246 -> 0.226 s). In bf16 the copy is made every step, and converting into
  // oneDNN's blocked bf16 layout costs 9x a plain conversion: AlexNet's bf16 step went 0.20 -> 0.18 s with
  // plain copies. A small layer's blocked copy costs little, and its blocked kernels are faster than the
  // plain gemm (seed_cnn's 4096->64 at batch 64: forward 0.08 against 0.28 ms in f32; in bf16 the plain
  // backward took 0.07 ms longer than a blocked copy saved).
  constexpr std::size_t kPlainWeightsFrom = 4 << 20;  // bytes of f32 weights: a million of them
  const bool plain_weights = weights_.value.get_desc().get_size() >= kPlainWeightsFrom;
  const memory::desc weights_md({opt_.out_features, opt_.in_features}, compute, plain_weights ? tag::ab : tag::any);
  const memory::desc diff_weights_md = weights_.grad.get_desc();
  const memory::desc bias_md = opt_.bias ? bias_.value.get_desc() : memory::desc();

  auto prop = mode == Mode::train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const auto fwd_pd =
      make_inner_product_forward_pd(ctx.engine(), prop, src_c, weights_md, bias_md, dst_md, relu_post_op(opt_.relu));
  fwd_ = dnnl::inner_product_forward(fwd_pd);
  fwd_src_ = Relayout(ctx, src_md, src_c);
  fwd_weights_ = WeightRelayout(ctx, weights_.value.get_desc(), fwd_pd.weights_desc());
  reset_output(ctx, dst_md);
  if (mode == Mode::infer) return dst_md;

  relu_backward_ = opt_.relu ? FusedReluBackward(ctx, dst_md, may_overwrite_diff_dst_) : FusedReluBackward();
  const auto bw_pd =
      make_inner_product_backward_weights_pd(ctx.engine(), src_c, diff_weights_md, bias_md, diff_dst_c, fwd_pd);
  bwd_weights_ = dnnl::inner_product_backward_weights(bw_pd);
  weight_gradients_.setup(ctx, bw_pd.diff_weights_desc(), weights_, bias_);
  bwd_diff_dst_ = Relayout(ctx, dst_md, diff_dst_c);
  bwd_data_.reset();
  if (need_diff_src) {
    const auto bd_pd = make_inner_product_backward_data_pd(ctx.engine(), src_md, weights_md, diff_dst_c, fwd_pd);
    bwd_data_ = dnnl::inner_product_backward_data(bd_pd);
    // Usually the backward wants the forward's weight layout: reuse the forward's reordered copy then.
    reuse_forward_weights_ = bd_pd.weights_desc() == fwd_pd.weights_desc();
    if (!reuse_forward_weights_)
      bwd_data_weights_ = WeightRelayout(ctx, weights_.value.get_desc(), bd_pd.weights_desc());
    diff_src_.reset(src_md);
  }
  return dst_md;
}

const Tensor& Dense::forward(Context& ctx, const Tensor& src) {
  src_ = &src;
  const Tensor& dst = output_.get(ctx);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, fwd_src_(ctx, src.memory())},
                                       {DNNL_ARG_WEIGHTS, fwd_weights_(ctx, weights_.value)},
                                       {DNNL_ARG_DST, dst.memory()}};
  if (opt_.bias) args.insert({DNNL_ARG_BIAS, bias_.value});
  fwd_.execute(ctx.stream(), args);
  // The backward's input gradient may read this copy again; else it goes back to the pool now.
  if (!(mode_ == Mode::train && bwd_data_ && reuse_forward_weights_)) fwd_weights_.release(ctx);
  return dst;
}

const Tensor& Dense::backward(Context& ctx, const Tensor& diff_dst) {
  if (mode_ != Mode::train) throw Error(describe() + ": backward called on a layer set up for inference");
  const memory& grad = bwd_diff_dst_(ctx, relu_backward_(ctx, output_.current().memory(), diff_dst.memory()));
  std::unordered_map<int, memory> wargs{
      {DNNL_ARG_SRC, fwd_src_.last(src_->memory())},
      {DNNL_ARG_DIFF_DST, grad}};
  weight_gradients_.bind(ctx, wargs);
  bwd_weights_.execute(ctx.stream(), wargs);
  weight_gradients_.finish(ctx);
  if (bwd_data_)
    bwd_data_->execute(ctx.stream(),
                       {{DNNL_ARG_DIFF_DST, grad},
                        {DNNL_ARG_WEIGHTS, reuse_forward_weights_ ? fwd_weights_.last(weights_.value)
                                                                  : bwd_data_weights_(ctx, weights_.value)},
                        {DNNL_ARG_DIFF_SRC, diff_src_.get(ctx).memory()}});
  fwd_weights_.release(ctx);
  bwd_data_weights_.release(ctx);
  return diff_src_.current();
}

}  // namespace ddl
