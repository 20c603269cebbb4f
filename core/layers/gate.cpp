#include "core/layers/gate.hpp"

#include <numeric>

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

Gate::Gate(std::string name, Sequential path) : name_(std::move(name)), path_(std::move(path)) {
  if (path_.empty()) throw Error("gate " + name_ + ": empty path");
}

std::vector<ParamSpec> Gate::param_specs() const {
  std::vector<ParamSpec> all;
  append_prefixed(all, path_.param_specs(), "path");
  return all;
}

std::vector<StateView> Gate::state() {
  std::vector<StateView> all;
  append_prefixed(all, path_.state(), "path");
  return all;
}

void Gate::bind(const std::vector<ParamView>& views, Context& ctx) { path_.bind(views, ctx); }

dnnl::memory::desc Gate::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  using dnnl::algorithm;
  set_output_type(ctx, dt::f32);
  if (data_type_of(src) != dt::f32) throw Error(name_ + ": takes f32 input");
  path_.set_may_overwrite_diff_dst(true);  // its gradient is this block's own
  factors_md_ = path_.setup(ctx, src, mode, true);
  const dims_t in = dims_of(src), factors = dims_of(factors_md_);
  // Factors of src's own shape (1x1 planes included) multiply element by element.
  const bool per_channel = factors != in && in.size() == 4 && factors == dims_t{in[0], in[1], 1, 1};
  // One factor an image: stochastic depth's mask as launch/export_onnx.py exports it.
  const bool per_image = factors != in && in.size() == 4 && factors == dims_t{in[0], 1, 1, 1};
  if (!per_channel && !per_image && factors != in)
    throw InputError(name_ + ": its path gives " + to_string(factors) + " for input " + to_string(in) +
                     "; a gate gives one factor an image, one an image and a channel, or one an element");
  src_md_ = src;
  scale_ = dnnl::binary(make_binary_pd(ctx.engine(), algorithm::binary_mul, src, factors_md_, src));
  reset_output(ctx, src);
  scale_diff_.reset();
  times_src_.reset();
  add_diffs_.reset();
  mean_plane_.reset();
  to_factors_layout_.reset();
  if (mode == Mode::infer) return src;
  times_src_ = dnnl::binary(make_binary_pd(ctx.engine(), algorithm::binary_mul, src, src, src));
  per_image_ = per_image;
  per_image_md_ = per_image ? plain_desc(factors) : dnnl::memory::desc();
  if (per_channel || per_image) {
    // The plane's mean of diff_dst * src, [N, C, 1, 1]: plain where the channels are then summed.
    const dims_t means = {in[0], in[1], 1, 1};
    const dnnl::memory::desc mean_md = per_image ? plain_desc(means) : dnnl::memory::desc(means, dt::f32, tag::any);
    const auto pd = make_pooling_forward_pd(ctx.engine(), dnnl::prop_kind::forward_inference,
                                            algorithm::pooling_avg_exclude_padding, src, mean_md, {1, 1},
                                            {in[2], in[3]}, {0, 0}, {0, 0});
    mean_plane_ = dnnl::pooling_forward(pd);
    plane_mean_md_ = pd.dst_desc();
    plane_size_ = static_cast<float>(in[2] * in[3]);
    const dnnl::memory::desc& given = per_image ? per_image_md_ : plane_mean_md_;
    if (given != factors_md_) to_factors_layout_.emplace(ctx, given, factors_md_);
  } else if (factors_md_ != src) {
    to_factors_layout_.emplace(ctx, src, factors_md_);
  }
  if (need_diff_src) {
    scale_diff_ = dnnl::binary(make_binary_pd(ctx.engine(), algorithm::binary_mul, src, factors_md_, src));
    add_diffs_ = dnnl::binary(make_binary_pd(ctx.engine(), algorithm::binary_add, src, src, src));
    diff_src_.reset(src);
  }
  return src;
}

const Tensor& Gate::forward(Context& ctx, const Tensor& src) {
  src_ = &src;
  factors_ = &path_.forward(ctx, src);
  const Tensor& dst = output_.get(ctx);
  scale_.execute(ctx.stream(),
                 {{DNNL_ARG_SRC_0, src.memory()}, {DNNL_ARG_SRC_1, factors_->memory()}, {DNNL_ARG_DST, dst.memory()}});
  return dst;
}

const Tensor& Gate::backward(Context& ctx, const Tensor& diff_dst) {
  Tensor product = ctx.lease(src_md_);
  times_src_->execute(
      ctx.stream(),
      {{DNNL_ARG_SRC_0, diff_dst.memory()}, {DNNL_ARG_SRC_1, src_->memory()}, {DNNL_ARG_DST, product.memory()}});
  if (mean_plane_) {
    Tensor mean = ctx.lease(plane_mean_md_);
    mean_plane_->execute(ctx.stream(), {{DNNL_ARG_SRC, product.memory()}, {DNNL_ARG_DST, mean.memory()}});
    ctx.give_back(product);
    float* sum = mean.data();  // [N, C]: the padding of a blocked layout stays 0
    for (std::size_t i = 0; i < plane_mean_md_.get_size() / sizeof(float); ++i) sum[i] *= plane_size_;
    product = std::move(mean);
  }
  if (per_image_) {  // [N, C] plain, summed over the channels
    Tensor sums = ctx.lease(per_image_md_);
    const auto images = dims_of(per_image_md_)[0], channels = dims_of(plane_mean_md_)[1];
    for (dnnl::memory::dim n = 0; n < images; ++n)
      sums.data()[n] = std::accumulate(product.data() + n * channels, product.data() + (n + 1) * channels, 0.0f);
    ctx.give_back(product);
    product = std::move(sums);
  }
  Tensor diff_factors;
  if (to_factors_layout_) {
    diff_factors = ctx.lease(factors_md_);
    (*to_factors_layout_)(ctx, product.memory(), diff_factors.memory());
    ctx.give_back(product);
  } else {
    diff_factors = std::move(product);  // in the factors' layout already: the gradient of the factors
  }
  // Before the path's backward, which may overwrite the factors (its output) with its gradient.
  if (scale_diff_)
    scale_diff_->execute(ctx.stream(), {{DNNL_ARG_SRC_0, diff_dst.memory()},
                                        {DNNL_ARG_SRC_1, factors_->memory()},
                                        {DNNL_ARG_DST, diff_src_.get(ctx, output_).memory()}});
  const Tensor& through_path = path_.backward(ctx, diff_factors);
  if (add_diffs_)
    add_diffs_->execute(ctx.stream(), {{DNNL_ARG_SRC_0, diff_src_.current().memory()},
                                       {DNNL_ARG_SRC_1, through_path.memory()},
                                       {DNNL_ARG_DST, diff_src_.current().memory()}});
  path_.release_gradient(ctx);
  ctx.give_back(diff_factors);
  return diff_src_.current();
}

}  // namespace ddl
