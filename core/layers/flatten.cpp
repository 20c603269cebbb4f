#include "core/layers/flatten.hpp"

#include "core/error.hpp"

namespace ddl {

dnnl::memory::desc Flatten::setup(Context& ctx, const dnnl::memory::desc& src_md, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src_md);
  if (in.size() < 2) throw InputError("flatten: expects at least [N, X], got " + to_string(in));
  src_md_ = src_md;
  const dims_t out = {in[0], static_cast<dnnl::memory::dim>(product(in) / in[0])};
  const dt type = data_type_of(src_md);  // bf16 only where the next layer takes it (takes_bf16)
  dst_ = Tensor(plain_desc(out, type), ctx.engine());
  const dnnl::memory::desc src_plain = plain_desc(in, type);
  // The flat output buffer, seen as the plain 4-D tensor it is.
  dst_as_plain_src_ = dnnl::memory(src_plain, ctx.engine(), dst_.data());
  to_plain_ = Copy(ctx, src_md, src_plain);
  need_diff_src_ = mode == Mode::train && need_diff_src;
  if (need_diff_src_) {
    diff_src_.reset(src_md);
    to_src_layout_ = Copy(ctx, src_plain, src_md);
  }
  return dst_.desc();
}

const Tensor& Flatten::forward(Context& ctx, const Tensor& src) {
  (*to_plain_)(ctx, src.memory(), dst_as_plain_src_);
  return dst_;
}

const Tensor& Flatten::backward(Context& ctx, const Tensor& diff_dst) {
  if (!need_diff_src_) return diff_src_.current();
  dnnl::memory diff_dst_plain(plain_desc(dims_of(src_md_), data_type_of(src_md_)), ctx.engine(),
                              const_cast<float*>(diff_dst.data()));
  (*to_src_layout_)(ctx, diff_dst_plain, diff_src_.get(ctx).memory());
  return diff_src_.current();
}

}  // namespace ddl
