#include "core/layers/pad2d.hpp"

#include <algorithm>
#include <cstring>

namespace ddl {

Pad2d::Pad2d(const Pad2dOptions& options) : opt_(options) {
  if (std::min({opt_.top, opt_.left, opt_.bottom, opt_.right}) < 0 || opt_.same_kernel < 0 || opt_.same_stride < 1 ||
      opt_.same_dilation < 1)
    throw InputError(describe() + ": a negative padding or window");
}

std::string Pad2d::describe() const {
  if (opt_.same_kernel)
    return "pad same" + std::string(opt_.same_lower ? " lower" : "") + " k" + std::to_string(opt_.same_kernel) + " s" +
           std::to_string(opt_.same_stride);
  std::string text = "pad " + std::to_string(opt_.top) + "," + std::to_string(opt_.left) + "," +
                     std::to_string(opt_.bottom) + "," + std::to_string(opt_.right);
  if (opt_.value != 0) text += " with " + std::to_string(opt_.value);
  return text;
}

dnnl::memory::desc Pad2d::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src);
  if (in.size() != 4) throw InputError(describe() + ": expects [N, C, H, W], got " + to_string(in));
  using dim = dnnl::memory::dim;
  // A damaged file's padding can be anything: each side within 2^24, and the whole within 2^40 values.
  constexpr dim kLargestSide = dim{1} << 24;
  if (opt_.same_kernel) {
    const auto pad = [&](dim size, int& begin, int& end) {
      const dim outputs = (size + opt_.same_stride - 1) / opt_.same_stride;
      const dim window = dim(opt_.same_kernel - 1) * opt_.same_dilation + 1;
      const dim total = std::max<dim>((outputs - 1) * opt_.same_stride + window - size, 0);
      if (total > 2 * kLargestSide)
        throw InputError(describe() + ": pads " + std::to_string(total) + " on input " + to_string(in));
      begin = int(opt_.same_lower ? total - total / 2 : total / 2);
      end = int(total - begin);
    };
    pad(in[2], opt_.top, opt_.bottom);
    pad(in[3], opt_.left, opt_.right);
  }
  if (std::max({opt_.top, opt_.left, opt_.bottom, opt_.right}) > kLargestSide)
    throw InputError(describe() + ": a side of more than 2^24 rows or columns");
  const dims_t out = {in[0], in[1], in[2] + opt_.top + opt_.bottom, in[3] + opt_.left + opt_.right};
  dim count = 1;
  for (const dim d : out)
    if (__builtin_mul_overflow(count, d, &count) || count > (dim{1} << 40))
      throw InputError(describe() + ": the padded images " + to_string(out) + " are too large");
  const int block = channel_block(src);
  // A blocked layout's padded channels must stay zero: another value goes into a plain output.
  const dnnl::memory::desc dst = block && opt_.value == 0 ? *channel_blocked_desc(out, dt::f32, block) : plain_desc(out);
  inner_md_ = dst.submemory_desc(in, {0, 0, opt_.top, opt_.left});
  to_inner_ = Copy(ctx, src, inner_md_);
  reset_output(ctx, dst);
  from_inner_.reset();
  if (mode == Mode::train && need_diff_src) {
    from_inner_ = Copy(ctx, inner_md_, src);
    diff_src_.reset(src);
  }
  return dst;
}

const Tensor& Pad2d::forward(Context& ctx, const Tensor& src) {
  Tensor& dst = output_.get(ctx);
  if (opt_.value == 0)
    std::memset(dst.data(), 0, dst.bytes());
  else
    std::fill(dst.data(), dst.data() + dst.elements(), opt_.value);
  (*to_inner_)(ctx, src.memory(), dnnl::memory(inner_md_, ctx.engine(), dst.data()));
  return dst;
}

const Tensor& Pad2d::backward(Context& ctx, const Tensor& diff_dst) {
  if (from_inner_)
    (*from_inner_)(ctx, dnnl::memory(inner_md_, ctx.engine(), const_cast<float*>(diff_dst.data())),
                   diff_src_.get(ctx).memory());
  return diff_src_.current();
}

}  // namespace ddl
