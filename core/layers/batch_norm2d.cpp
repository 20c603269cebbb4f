#include "core/layers/batch_norm2d.hpp"

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

using memory = dnnl::memory;
using flags = dnnl::normalization_flags;

namespace {

// The layout oneDNN gives a 3x3 convolution's output of these dims on this CPU; `plain` itself where it has no
// such convolution (bf16 on a CPU without it).
memory::desc convolution_layout(const dnnl::engine& engine, const memory::desc& plain) {
  const dims_t dims = dims_of(plain), weights = {dims[1], dims[1], 3, 3}, ones = {1, 1}, zeros = {0, 0};
  const dt type = data_type_of(plain);
  try {
    return make_conv_forward_pd(engine, dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                memory::desc(dims, type, tag::any), memory::desc(weights, type, tag::any),
                                memory::desc(), memory::desc(dims, type, tag::any), ones, zeros, ones, ones)
        .dst_desc();
  } catch (const dnnl::error&) {
    return plain;
  }
}

}  // namespace

BatchNorm2d::BatchNorm2d(const BatchNorm2dOptions& options)
    : opt_(options), running_mean_(options.channels), running_var_(options.channels) {
  if (opt_.channels <= 0) throw InputError("batch_norm2d: channels must be positive");
  for (std::size_t i = 0; i < running_var_.size(); ++i) running_var_[i] = 1.0f;
}

std::string BatchNorm2d::describe() const {
  return "batch_norm2d " + std::to_string(opt_.channels) + (opt_.relu ? " +relu" : "");
}

std::vector<ParamSpec> BatchNorm2d::param_specs() const {
  return {{"gamma", {opt_.channels}, Init::ones}, {"beta", {opt_.channels}, Init::zeros}};
}

void BatchNorm2d::bind(const std::vector<ParamView>& views, Context& ctx) {
  memory::desc md({opt_.channels}, dt::f32, tag::x);
  scale_ = ParamMemory(views[0], md, ctx.engine());
  shift_ = ParamMemory(views[1], md, ctx.engine());
  running_mean_mem_ = memory(md, ctx.engine(), running_mean_.data());
  running_var_mem_ = memory(md, ctx.engine(), running_var_.data());
}

memory::desc BatchNorm2d::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool /*need_diff_src*/) {
  const dims_t in = dims_of(src_md);
  // oneDNN normalises [N, C], [N, C, L] and [N, C, D, H, W] alike: BatchNorm1d, 2d and 3d.
  if (in.size() < 2 || in.size() > 5 || in[1] != opt_.channels)
    throw InputError(describe() + ": expects input [N, " + std::to_string(opt_.channels) + ", ...], got " +
                     to_string(in));
  mode_ = mode;
  reduced_count_ = product(in) / static_cast<std::size_t>(opt_.channels);
  // oneDNN sums [N, C, L] (BatchNorm1d's) less precisely than the same numbers seen as [N, C, L, 1]: 3e-5 against
  // 1e-6 in y on [64, 6, 256], 30x float32's rounding. Rank 3 runs as rank 4 over the same memory.
  primitive_md_ = in.size() == 3 ? src_md.reshape({in[0], in[1], in[2], 1}) : src_md;
  to_blocked_.release(ctx);
  to_blocked_ = LeasedCopy();
  if (in.size() == 4 && src_md == plain_desc(in, data_type_of(src_md))) {
    primitive_md_ = convolution_layout(ctx.engine(), src_md);
    to_blocked_ = LeasedCopy(ctx, src_md, primitive_md_);
  }
  const auto base = flags::use_scale | flags::use_shift | (opt_.relu ? flags::fuse_norm_relu : flags::none);
  if (mode == Mode::infer) {
    const auto pd = make_normalization_forward_pd<dnnl::batch_normalization_forward>(
        ctx.engine(), dnnl::prop_kind::forward_inference, primitive_md_, opt_.epsilon, base | flags::use_global_stats);
    fwd_ = dnnl::batch_normalization_forward(pd);
    reset_output(ctx, in.size() == 3 ? src_md : pd.dst_desc());
    bwd_.reset();
    diff_to_plain_.reset();
    return output_.desc();
  }
  const auto fwd_pd = make_normalization_forward_pd<dnnl::batch_normalization_forward>(
      ctx.engine(), dnnl::prop_kind::forward_training, primitive_md_, opt_.epsilon, base);
  fwd_ = dnnl::batch_normalization_forward(fwd_pd);
  reset_output(ctx, in.size() == 3 ? src_md : fwd_pd.dst_desc());
  mean_ = Tensor(fwd_pd.mean_desc(), ctx.engine());
  variance_ = Tensor(fwd_pd.variance_desc(), ctx.engine());
  workspace_ = opt_.relu ? Tensor(fwd_pd.workspace_desc(), ctx.engine()) : Tensor();
  // Backward always yields diff_src; it is cheap next to the convolutions around it.
  const auto bwd_pd = make_normalization_backward_pd<dnnl::batch_normalization_backward>(
      ctx.engine(), dnnl::prop_kind::backward, primitive_md_, primitive_md_, opt_.epsilon, base, fwd_pd);
  bwd_ = dnnl::batch_normalization_backward(bwd_pd);
  diff_src_.reset(in.size() == 3 ? src_md : bwd_pd.diff_src_desc());
  diff_to_plain_.reset();
  if (in.size() == 4 && bwd_pd.diff_src_desc() != src_md) {  // the input gradient in the input's layout
    diff_to_plain_.emplace(ctx, bwd_pd.diff_src_desc(), src_md);
    diff_src_.reset(src_md);
  }
  return output_.desc();
}

const Tensor& BatchNorm2d::forward(Context& ctx, const Tensor& src) {
  src_ = &src;
  const Tensor& dst = output_.get(ctx);
  if (mode_ == Mode::infer) {
    fwd_.execute(ctx.stream(), {{DNNL_ARG_SRC, to_blocked_(ctx, as_primitive(ctx, src))},
                                {DNNL_ARG_MEAN, running_mean_mem_},
                                {DNNL_ARG_VARIANCE, running_var_mem_},
                                {DNNL_ARG_SCALE, scale_.value},
                                {DNNL_ARG_SHIFT, shift_.value},  // oneDNN 2.6 requires it with use_shift
                                {DNNL_ARG_DST, as_primitive(ctx, dst)}});
    to_blocked_.release(ctx);
    return dst;
  }
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, to_blocked_(ctx, as_primitive(ctx, src))},
                                             {DNNL_ARG_MEAN, mean_.memory()},
                                             {DNNL_ARG_VARIANCE, variance_.memory()},
                                             {DNNL_ARG_SCALE, scale_.value},
                                             {DNNL_ARG_SHIFT, shift_.value},
                                             {DNNL_ARG_DST, as_primitive(ctx, dst)}};
  if (opt_.relu) args.insert({DNNL_ARG_WORKSPACE, workspace_.memory()});
  fwd_.execute(ctx.stream(), args);
  const float m = opt_.momentum;
  const float unbias = reduced_count_ > 1 ? static_cast<float>(reduced_count_) / (reduced_count_ - 1) : 1.0f;
  for (int c = 0; c < opt_.channels; ++c) {
    running_mean_[c] = (1 - m) * running_mean_[c] + m * mean_.data()[c];
    running_var_[c] = (1 - m) * running_var_[c] + m * variance_.data()[c] * unbias;
  }
  return dst;
}

const Tensor& BatchNorm2d::backward(Context& ctx, const Tensor& diff_dst) {
  if (!bwd_) throw Error(describe() + ": backward called on a layer set up for inference");
  // The backward reads the source, statistics and workspace, not the output (the next layer's backward,
  // its last reader, has run): the input gradient may take its storage.
  Tensor blocked_diff;
  if (diff_to_plain_) blocked_diff = ctx.lease(primitive_md_);
  const dnnl::memory diff_src = diff_to_plain_ ? blocked_diff.memory() : as_primitive(ctx, diff_src_.get(ctx, output_));
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, to_blocked_.last(as_primitive(ctx, *src_))},
                                             {DNNL_ARG_MEAN, mean_.memory()},
                                             {DNNL_ARG_VARIANCE, variance_.memory()},
                                             {DNNL_ARG_DIFF_DST, as_primitive(ctx, diff_dst)},
                                             {DNNL_ARG_SCALE, scale_.value},
                                             {DNNL_ARG_DIFF_SRC, diff_src},
                                             {DNNL_ARG_DIFF_SCALE, scale_.grad},
                                             {DNNL_ARG_DIFF_SHIFT, shift_.grad}};
  if (kBatchNormBackwardTakesShift) args.insert({DNNL_ARG_SHIFT, shift_.value});
  if (opt_.relu) args.insert({DNNL_ARG_WORKSPACE, workspace_.memory()});
  bwd_->execute(ctx.stream(), args);
  to_blocked_.release(ctx);
  if (diff_to_plain_) {
    (*diff_to_plain_)(ctx, blocked_diff.memory(), diff_src_.get(ctx, output_).memory());
    ctx.give_back(blocked_diff);
  }
  return diff_src_.current();
}

dnnl::memory BatchNorm2d::as_primitive(Context& ctx, const Tensor& t) const {
  if (dims_of(t.desc()).size() != 3) return t.memory();
  return dnnl::memory(primitive_md_, ctx.engine(), t.memory().get_data_handle());
}

std::vector<StateView> BatchNorm2d::state() {
  return {{"running_mean", running_mean_.span(), {}}, {"running_var", running_var_.span(), {}}};
}

}  // namespace ddl
