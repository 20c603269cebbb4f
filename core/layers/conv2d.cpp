#include "core/layers/conv2d.hpp"

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

using memory = dnnl::memory;

Conv2d::Conv2d(const Conv2dOptions& options) : opt_(options) {
  if (opt_.in_channels <= 0 || opt_.out_channels <= 0 || opt_.kernel <= 0 || opt_.stride <= 0 || opt_.padding < 0 ||
      opt_.dilation <= 0 || opt_.groups <= 0)
    throw InputError("conv2d: channels, kernel, stride, dilation and groups must be positive and padding non-negative");
  const int g = opt_.groups;
  if (opt_.in_channels % g != 0 || opt_.out_channels % g != 0)
    throw InputError("conv2d: " + std::to_string(g) + " groups do not divide " + std::to_string(opt_.in_channels) +
                     " input and " + std::to_string(opt_.out_channels) + " output channels");
  weights_dims_ = {opt_.out_channels, opt_.in_channels, opt_.kernel, opt_.kernel};
  if (g > 1) weights_dims_ = {g, opt_.out_channels / g, opt_.in_channels / g, opt_.kernel, opt_.kernel};
}

std::string Conv2d::describe() const {
  std::string s = "conv2d " + std::to_string(opt_.in_channels) + "->" + std::to_string(opt_.out_channels) + " k" +
                  std::to_string(opt_.kernel) + " s" + std::to_string(opt_.stride) + " p" +
                  std::to_string(opt_.padding);
  if (opt_.dilation != 1) s += " d" + std::to_string(opt_.dilation);
  if (opt_.groups != 1) s += " g" + std::to_string(opt_.groups);
  return s + (opt_.relu ? " +relu" : "");
}

std::vector<ParamSpec> Conv2d::param_specs() const {
  const std::size_t area = static_cast<std::size_t>(opt_.kernel) * opt_.kernel;
  const int group_in = opt_.in_channels / opt_.groups;
  // Fans as PyTorch counts them for grouped weights: the inputs one output sees, every output times the area.
  std::vector<ParamSpec> specs{{"weight",
                                {opt_.out_channels, group_in, opt_.kernel, opt_.kernel},
                                opt_.init,
                                group_in * area,
                                opt_.out_channels * area}};
  if (opt_.bias) specs.push_back({"bias", {opt_.out_channels}, Init::zeros});
  return specs;
}

void Conv2d::bind(const std::vector<ParamView>& views, Context& ctx) {
  weights_ = ParamMemory(views[0], memory::desc(weights_dims_, dt::f32, opt_.groups > 1 ? tag::goihw : tag::oihw),
                         ctx.engine());
  if (opt_.bias) bias_ = ParamMemory(views[1], memory::desc({opt_.out_channels}, dt::f32, tag::x), ctx.engine());
}

memory::desc Conv2d::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src_md);
  if (in.size() != 4 || in[1] != opt_.in_channels)
    throw InputError(describe() + ": expects input [N, " + std::to_string(opt_.in_channels) + ", H, W], got " +
                     to_string(in));
  const memory::dim span = memory::dim(opt_.dilation) * (opt_.kernel - 1) + 1;  // the kernel's reach
  const memory::dim out_h = (in[2] + 2 * opt_.padding - span) / opt_.stride + 1;
  const memory::dim out_w = (in[3] + 2 * opt_.padding - span) / opt_.stride + 1;
  if (in[2] + 2 * opt_.padding < span || in[3] + 2 * opt_.padding < span)
    throw InputError(describe() + ": input " + to_string(in) + " is smaller than the kernel");
  mode_ = mode;
  need_diff_src_ = need_diff_src;

  const dims_t dst_dims = {in[0], opt_.out_channels, out_h, out_w};
  const dims_t strides = {opt_.stride, opt_.stride}, padding = {opt_.padding, opt_.padding};
  const dims_t dilates = {opt_.dilation - 1, opt_.dilation - 1};  // oneDNN counts the gaps
  // In bf16 the products' inputs (source, weights, output gradient) are bf16; they write the output in
  // the type the next layer takes, and the input gradient in the input's type.
  const dt compute = ctx.compute_type();
  memory::desc src_any(in, compute, tag::any), dst_any(dst_dims, output_type_, tag::any);
  memory::desc diff_src_any(in, data_type_of(src_md), tag::any), diff_dst_any(dst_dims, compute, tag::any);
  memory::desc weights_any(weights_dims_, compute, tag::any), diff_weights_any(weights_dims_, dt::f32, tag::any);
  memory::desc bias_md = opt_.bias ? memory::desc({opt_.out_channels}, dt::f32, tag::x) : memory::desc();

  auto prop = mode == Mode::train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const auto fwd_pd =
      make_conv_forward_pd(ctx.engine(), prop, dnnl::algorithm::convolution_direct, src_any, weights_any, bias_md,
                           dst_any, strides, dilates, padding, padding, relu_post_op(opt_.relu));
  fwd_ = dnnl::convolution_forward(fwd_pd);
  fwd_src_ = Relayout(ctx, src_md, fwd_pd.src_desc());
  fwd_weights_ = LeasedCopy(ctx, weights_.value.get_desc(), fwd_pd.weights_desc());
  reset_output(ctx, fwd_pd.dst_desc());
  if (mode == Mode::infer) return output_.desc();

  const memory::desc& dst_md = fwd_pd.dst_desc();
  const bool relu_backward_here = opt_.relu && !relu_backward_in_next_;
  relu_backward_ = relu_backward_here ? FusedReluBackward(ctx, dst_md, may_overwrite_diff_dst_) : FusedReluBackward();

  const auto bw_pd =
      make_conv_backward_weights_pd(ctx.engine(), dnnl::algorithm::convolution_direct, src_any, diff_weights_any,
                                    bias_md, diff_dst_any, strides, dilates, padding, padding, fwd_pd);
  bwd_weights_ = dnnl::convolution_backward_weights(bw_pd);
  bwd_weights_src_ = Relayout(ctx, fwd_pd.src_desc(), bw_pd.src_desc());
  bwd_weights_diff_dst_ = Relayout(ctx, dst_md, bw_pd.diff_dst_desc());
  weight_gradients_.setup(ctx, bw_pd.diff_weights_desc(), weights_, bias_);

  bwd_data_.reset();
  diff_src_to_input_layout_.reset();
  if (need_diff_src) {
    const auto bd_pd =
        make_conv_backward_data_pd(ctx.engine(), dnnl::algorithm::convolution_direct, diff_src_any, weights_any,
                                   diff_dst_any, strides, dilates, padding, padding, fwd_pd);
    bwd_data_ = dnnl::convolution_backward_data(bd_pd);
    // Usually the backward wants the forward's weight layout: reuse the forward's reordered copy then.
    reuse_forward_weights_ = bd_pd.weights_desc() == fwd_pd.weights_desc();
    if (!reuse_forward_weights_) bwd_data_weights_ = LeasedCopy(ctx, weights_.value.get_desc(), bd_pd.weights_desc());
    // And the weights' backward's converted output gradient (bf16, or another layout) when it fits.
    reuse_weights_diff_dst_ = bd_pd.diff_dst_desc() == bw_pd.diff_dst_desc();
    bwd_data_diff_dst_ = reuse_weights_diff_dst_ ? Relayout() : Relayout(ctx, dst_md, bd_pd.diff_dst_desc());
    diff_src_.reset(src_md);
    if (bd_pd.diff_src_desc() != src_md) {
      diff_src_raw_ = Tensor(bd_pd.diff_src_desc(), ctx.engine());
      diff_src_to_input_layout_ = Copy(ctx, bd_pd.diff_src_desc(), src_md);
    }
  }
  return output_.desc();
}

const Tensor& Conv2d::forward(Context& ctx, const Tensor& src) {
  const Tensor& dst = output_.get(ctx);
  src_ = &src;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, fwd_src_(ctx, src.memory())},
                                       {DNNL_ARG_WEIGHTS, fwd_weights_(ctx, weights_.value)},
                                       {DNNL_ARG_DST, dst.memory()}};
  if (opt_.bias) args.insert({DNNL_ARG_BIAS, bias_.value});
  fwd_.execute(ctx.stream(), args);
  // The backward's input gradient may read this copy again; else it goes back to the pool now.
  if (!(mode_ == Mode::train && bwd_data_ && reuse_forward_weights_)) fwd_weights_.release(ctx);
  return dst;
}

const Tensor& Conv2d::backward(Context& ctx, const Tensor& diff_dst) {
  if (mode_ != Mode::train) throw Error(describe() + ": backward called on a layer set up for inference");
  const memory& grad = relu_backward_(ctx, output_.current().memory(), diff_dst.memory());
  // The forward's reordered source, if there was one, is still in fwd_src_'s buffer.
  const memory& fwd_src = fwd_src_.last(src_->memory());
  std::unordered_map<int, memory> wargs{
      {DNNL_ARG_SRC, bwd_weights_src_(ctx, fwd_src)},
      {DNNL_ARG_DIFF_DST, bwd_weights_diff_dst_(ctx, grad)}};
  weight_gradients_.bind(ctx, wargs);
  bwd_weights_.execute(ctx.stream(), wargs);
  weight_gradients_.finish(ctx);

  if (!bwd_data_) return diff_src_.current();
  // Nothing reads the output from here until the next forward (a fused ReLU was its last reader): the
  // input gradient may take its storage.
  const memory& out = diff_src_to_input_layout_ ? diff_src_raw_.memory() : diff_src_.get(ctx, output_).memory();
  bwd_data_->execute(ctx.stream(), {{DNNL_ARG_DIFF_DST, reuse_weights_diff_dst_ ? bwd_weights_diff_dst_.last(grad)
                                                                               : bwd_data_diff_dst_(ctx, grad)},
                                    {DNNL_ARG_WEIGHTS, reuse_forward_weights_ ? fwd_weights_.last(weights_.value)
                                                                              : bwd_data_weights_(ctx, weights_.value)},
                                    {DNNL_ARG_DIFF_SRC, out}});
  fwd_weights_.release(ctx);
  bwd_data_weights_.release(ctx);
  if (diff_src_to_input_layout_) (*diff_src_to_input_layout_)(ctx, diff_src_raw_.memory(), diff_src_.get(ctx).memory());
  return diff_src_.current();
}

}  // namespace ddl
