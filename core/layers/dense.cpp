#include "core/layers/dense.hpp"

#include "core/error.hpp"

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
  std::vector<ParamSpec> specs{{"weight", {opt_.out_features, opt_.in_features}, opt_.init,
                                static_cast<std::size_t>(opt_.in_features), static_cast<std::size_t>(opt_.out_features)}};
  if (opt_.bias) specs.push_back({"bias", {opt_.out_features}, Init::zeros});
  return specs;
}

void Dense::bind(const std::vector<ParamView>& views, Context& ctx) {
  memory::desc weights_md({opt_.out_features, opt_.in_features}, dt::f32, tag::oi);
  user_weights_ = memory(weights_md, ctx.engine(), views[0].value.data());
  user_diff_weights_ = memory(weights_md, ctx.engine(), views[0].grad.data());
  if (opt_.bias) {
    memory::desc bias_md({opt_.out_features}, dt::f32, tag::x);
    user_bias_ = memory(bias_md, ctx.engine(), views[1].value.data());
    user_diff_bias_ = memory(bias_md, ctx.engine(), views[1].grad.data());
  }
}

memory::desc Dense::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool need_diff_src) {
  const dims_t in = src_md.dims();
  if (in.size() != 2 || in[1] != opt_.in_features)
    throw InputError(describe() + ": expects input [N, " + std::to_string(opt_.in_features) + "], got " +
                     to_string(in));
  if (src_md != plain_desc(in)) throw Error(describe() + ": expects a plain [N, I] input");
  mode_ = mode;
  const memory::desc dst_md = plain_desc({in[0], opt_.out_features});
  const memory::desc weights_any({opt_.out_features, opt_.in_features}, dt::f32, tag::any);
  const memory::desc bias_md = opt_.bias ? user_bias_.get_desc() : memory::desc();

  auto prop = mode == Mode::train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  dnnl::primitive_attr attr;
  if (opt_.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  dnnl::inner_product_forward::primitive_desc fwd_pd(
      dnnl::inner_product_forward::desc(prop, src_md, weights_any, bias_md, dst_md), attr, ctx.engine());
  fwd_ = dnnl::inner_product_forward(fwd_pd);
  fwd_weights_ = Relayout(ctx, user_weights_.get_desc(), fwd_pd.weights_desc());
  dst_ = Tensor(dst_md, ctx.engine());
  if (mode == Mode::infer) return dst_md;

  relu_bwd_.reset();
  if (opt_.relu) {
    auto alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    dnnl::eltwise_forward::primitive_desc hint(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, dst_md, 0.0f, 0.0f), ctx.engine());
    relu_bwd_ = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
        dnnl::eltwise_backward::desc(alg, dst_md, dst_md, 0.0f, 0.0f), ctx.engine(), hint));
    diff_pre_relu_ = Tensor(dst_md, ctx.engine());
  }
  dnnl::inner_product_backward_weights::primitive_desc bw_pd(
      dnnl::inner_product_backward_weights::desc(src_md, weights_any, bias_md, dst_md), ctx.engine(), fwd_pd);
  bwd_weights_ = dnnl::inner_product_backward_weights(bw_pd);
  diff_weights_to_user_.reset();
  if (bw_pd.diff_weights_desc() != user_diff_weights_.get_desc()) {
    diff_weights_ = Tensor(bw_pd.diff_weights_desc(), ctx.engine());
    diff_weights_to_user_ = Copy(ctx, bw_pd.diff_weights_desc(), user_diff_weights_.get_desc());
  }
  bwd_data_.reset();
  if (need_diff_src) {
    dnnl::inner_product_backward_data::primitive_desc bd_pd(
        dnnl::inner_product_backward_data::desc(src_md, weights_any, dst_md), ctx.engine(), fwd_pd);
    bwd_data_ = dnnl::inner_product_backward_data(bd_pd);
    // Usually the backward wants the forward's weight layout: reuse the forward's reordered copy then.
    reuse_forward_weights_ = bd_pd.weights_desc() == fwd_pd.weights_desc();
    if (!reuse_forward_weights_) bwd_data_weights_ = Relayout(ctx, user_weights_.get_desc(), bd_pd.weights_desc());
    diff_src_ = Tensor(src_md, ctx.engine());
  }
  return dst_md;
}

const Tensor& Dense::forward(Context& ctx, const Tensor& src) {
  src_ = &src;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src.memory()},
                                       {DNNL_ARG_WEIGHTS, fwd_weights_(ctx, user_weights_)},
                                       {DNNL_ARG_DST, dst_.memory()}};
  if (opt_.bias) args.insert({DNNL_ARG_BIAS, user_bias_});
  fwd_.execute(ctx.stream(), args);
  return dst_;
}

const Tensor& Dense::backward(Context& ctx, const Tensor& diff_dst) {
  if (mode_ != Mode::train) throw Error(describe() + ": backward called on a layer set up for inference");
  const memory* grad = &diff_dst.memory();
  if (relu_bwd_) {
    relu_bwd_->execute(ctx.stream(), {{DNNL_ARG_DST, dst_.memory()},
                                      {DNNL_ARG_DIFF_DST, diff_dst.memory()},
                                      {DNNL_ARG_DIFF_SRC, diff_pre_relu_.memory()}});
    grad = &diff_pre_relu_.memory();
  }
  std::unordered_map<int, memory> wargs{
      {DNNL_ARG_SRC, src_->memory()},
      {DNNL_ARG_DIFF_DST, *grad},
      {DNNL_ARG_DIFF_WEIGHTS, diff_weights_to_user_ ? diff_weights_.memory() : user_diff_weights_}};
  if (opt_.bias) wargs.insert({DNNL_ARG_DIFF_BIAS, user_diff_bias_});
  bwd_weights_.execute(ctx.stream(), wargs);
  if (diff_weights_to_user_) (*diff_weights_to_user_)(ctx, diff_weights_.memory(), user_diff_weights_);
  if (bwd_data_)
    bwd_data_->execute(ctx.stream(), {{DNNL_ARG_DIFF_DST, *grad},
                                      {DNNL_ARG_WEIGHTS, reuse_forward_weights_ ? fwd_weights_.last(user_weights_) : bwd_data_weights_(ctx, user_weights_)},
                                      {DNNL_ARG_DIFF_SRC, diff_src_.memory()}});
  return diff_src_;
}

}  // namespace ddl
