#include "core/layers/channel_shuffle.hpp"

namespace ddl {

ChannelShuffle::ChannelShuffle(int groups, dims_t image) : groups_(groups), image_(std::move(image)) {
  if (groups < 1) throw InputError("channel shuffle: " + std::to_string(groups) + " groups");
}

dnnl::memory::desc ChannelShuffle::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src);
  if (in.size() < 2 || in[1] % groups_ != 0)
    throw InputError(describe() + ": the groups do not divide the input " + to_string(in) + "'s channels");
  if (!image_.empty() && dims_t(in.begin() + 1, in.end()) != image_)
    throw InputError(describe() + ": the input is " + to_string(in) + ", its images not " + to_string(image_));
  // oneDNN's group_size is the other side of the transpose: the channels a group holds.
  const int group_size = int(in[1] / groups_);
  const auto prop = mode == Mode::train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const auto forward_pd = make_shuffle_forward_pd(ctx.engine(), prop, src, 1, group_size);
  forward_ = dnnl::shuffle_forward(forward_pd);
  reset_output(ctx, src);
  backward_.reset();
  if (mode == Mode::train && need_diff_src) {
    backward_ = dnnl::shuffle_backward(make_shuffle_backward_pd(ctx.engine(), src, 1, group_size, forward_pd));
    diff_src_.reset(src);
  }
  return src;
}

const Tensor& ChannelShuffle::forward(Context& ctx, const Tensor& src) {
  const Tensor& dst = output_.get(ctx);
  forward_->execute(ctx.stream(), {{DNNL_ARG_SRC, src.memory()}, {DNNL_ARG_DST, dst.memory()}});
  return dst;
}

const Tensor& ChannelShuffle::backward(Context& ctx, const Tensor& diff_dst) {
  if (backward_)
    backward_->execute(ctx.stream(),
                       {{DNNL_ARG_DIFF_DST, diff_dst.memory()}, {DNNL_ARG_DIFF_SRC, diff_src_.get(ctx).memory()}});
  return diff_src_.current();
}

}  // namespace ddl
