#include "core/layers/channel_slice.hpp"

#include <algorithm>
#include <cstring>

namespace ddl {

ChannelSlice::ChannelSlice(dnnl::memory::dim begin, std::optional<dnnl::memory::dim> end) : begin_(begin), end_(end) {
  if (begin < 0 || (end && *end <= begin)) throw InputError(describe() + ": no channels");
}

std::string ChannelSlice::describe() const {
  return "channels " + std::to_string(begin_) + ".." + (end_ ? std::to_string(*end_) : "");
}

dnnl::memory::desc ChannelSlice::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src);
  // As ONNX's Slice: an end past the channels is the last.
  if (in.size() < 2 || begin_ >= in[1])
    throw InputError(describe() + ": the input " + to_string(in) + " has no such channels");
  dims_t out = in, offsets(in.size(), 0);
  out[1] = std::min(end_.value_or(in[1]), in[1]) - begin_;
  offsets[1] = begin_;
  const dt type = data_type_of(src);
  const int block = channel_block(src);
  // A sub-tensor of the plain layout, or of a channel-blocked one on block boundaries; any other layout is
  // read through a plain copy.
  const bool in_place =
      block ? begin_ % block == 0 && out[1] % block == 0 : src == plain_desc(in, type);
  whole_md_ = in_place ? src : plain_desc(in, type);
  part_md_ = whole_md_.submemory_desc(out, offsets);
  const dnnl::memory::desc dst = block && in_place ? *channel_blocked_desc(out, type, block) : plain_desc(out, type);
  to_plain_.reset();
  from_plain_.reset();
  if (!in_place) to_plain_ = LeasedCopy(ctx, src, whole_md_);
  take_part_ = Copy(ctx, part_md_, dst);
  reset_output(ctx, dst);
  put_part_.reset();
  if (mode == Mode::train && need_diff_src) {
    put_part_ = Copy(ctx, dst, part_md_);
    if (!in_place) from_plain_ = Copy(ctx, whole_md_, src);
    diff_src_.reset(src);
  }
  return dst;
}

const Tensor& ChannelSlice::forward(Context& ctx, const Tensor& src) {
  const dnnl::memory& whole = to_plain_ ? (*to_plain_)(ctx, src.memory()) : src.memory();
  const Tensor& dst = output_.get(ctx);
  (*take_part_)(ctx, dnnl::memory(part_md_, ctx.engine(), whole.get_data_handle()), dst.memory());
  if (to_plain_) to_plain_->release(ctx);
  return dst;
}

const Tensor& ChannelSlice::backward(Context& ctx, const Tensor& diff_dst) {
  if (!put_part_) return diff_src_.current();
  Tensor& diff_src = diff_src_.get(ctx);
  Tensor whole = from_plain_ ? ctx.lease(whole_md_) : Tensor();
  Tensor& zeroed = from_plain_ ? whole : diff_src;
  std::memset(zeroed.data(), 0, zeroed.bytes());
  (*put_part_)(ctx, diff_dst.memory(), dnnl::memory(part_md_, ctx.engine(), zeroed.data()));
  if (from_plain_) {
    (*from_plain_)(ctx, whole.memory(), diff_src.memory());
    ctx.give_back(whole);
  }
  return diff_src;
}

}  // namespace ddl
