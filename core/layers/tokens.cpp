#include "core/layers/tokens.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace ddl {

using memory = dnnl::memory;

memory::desc ImageToTokens::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src_md);
  if (in.size() != 4) throw InputError(describe() + ": expects [N, C, h, w], got " + to_string(in));
  channels_last_ = memory::desc(in, dt::f32, tag::nhwc);
  to_tokens_ = Copy(ctx, src_md, channels_last_);
  dst_ = Tensor(plain_desc({in[0], in[2] * in[3], in[1]}), ctx.engine());
  to_image_.reset();
  if (mode == Mode::train && need_diff_src) {
    to_image_ = Copy(ctx, channels_last_, src_md);
    diff_src_.reset(src_md);
  }
  return dst_.desc();
}

const Tensor& ImageToTokens::forward(Context& ctx, const Tensor& src) {
  (*to_tokens_)(ctx, src.memory(), memory(channels_last_, ctx.engine(), dst_.data()));
  return dst_;
}

const Tensor& ImageToTokens::backward(Context& ctx, const Tensor& diff_dst) {
  if (to_image_)
    (*to_image_)(ctx, memory(channels_last_, ctx.engine(), const_cast<float*>(diff_dst.data())), diff_src_.get(ctx).memory());
  return diff_src_.current();
}

std::string ClassTokenAndPosition::describe() const {
  return "class token + position " + std::to_string(tokens_ + 1) + "x" + std::to_string(dim_);
}

std::vector<ParamSpec> ClassTokenAndPosition::param_specs() const {
  return {{"class_token", {dim_}, Init::zeros}, {"position", {tokens_ + 1, dim_}, Init::normal_002}};
}

void ClassTokenAndPosition::bind(const std::vector<ParamView>& views, Context&) {
  class_token_ = views[0];
  position_ = views[1];
}

memory::desc ClassTokenAndPosition::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src_md);
  if (in.size() != 3 || in[1] != tokens_ || in[2] != dim_ || src_md != plain_desc(in))
    throw InputError(describe() + ": expects plain tokens [N, " + std::to_string(tokens_) + ", " +
                     std::to_string(dim_) + "], got " + to_string(in));
  need_diff_src_ = mode == Mode::train && need_diff_src;
  dst_ = Tensor(plain_desc({in[0], tokens_ + 1, dim_}), ctx.engine());
  if (need_diff_src_) diff_src_.reset(src_md);
  return dst_.desc();
}

const Tensor& ClassTokenAndPosition::forward(Context&, const Tensor& src) {
  const std::size_t n = static_cast<std::size_t>(src.dims()[0]), t = tokens_, d = dim_;
  const float* pos = position_.value.data();
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) {
    float* y = dst_.data() + i * (t + 1) * d;
    const float* x = src.data() + i * t * d;
    for (std::size_t c = 0; c < d; ++c) y[c] = class_token_.value[c] + pos[c];
    for (std::size_t j = d; j < (t + 1) * d; ++j) y[j] = x[j - d] + pos[j];
  }
  return dst_;
}

const Tensor& ClassTokenAndPosition::backward(Context& ctx, const Tensor& diff_dst) {
  const std::size_t n = static_cast<std::size_t>(diff_dst.dims()[0]), t = tokens_, d = dim_;
  float* dpos = position_.grad.data();
  float* dx = need_diff_src_ ? diff_src_.get(ctx).data() : nullptr;
  std::fill(position_.grad.begin(), position_.grad.end(), 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    const float* dy = diff_dst.data() + i * (t + 1) * d;
    for (std::size_t j = 0; j < (t + 1) * d; ++j) dpos[j] += dy[j];
    if (dx) std::memcpy(dx + i * t * d, dy + d, t * d * sizeof(float));
  }
  std::copy(dpos, dpos + d, class_token_.grad.begin());  // the class token's gradient is position 0's
  return diff_src_.current();
}

memory::desc TakeClassToken::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool need_diff_src) {
  in_ = dims_of(src_md);
  if (in_.size() != 3 || src_md != plain_desc(in_))
    throw InputError(describe() + ": expects plain tokens [N, T, D], got " + to_string(in_));
  need_diff_src_ = mode == Mode::train && need_diff_src;
  dst_ = Tensor(plain_desc({in_[0], in_[2]}), ctx.engine());
  if (need_diff_src_) diff_src_.reset(src_md);
  return dst_.desc();
}

const Tensor& TakeClassToken::forward(Context&, const Tensor& src) {
  const std::size_t t = in_[1], d = in_[2];
  for (memory::dim i = 0; i < in_[0]; ++i) std::memcpy(dst_.data() + i * d, src.data() + i * t * d, d * sizeof(float));
  return dst_;
}

const Tensor& TakeClassToken::backward(Context& ctx, const Tensor& diff_dst) {
  if (!need_diff_src_) return diff_src_.current();
  const std::size_t t = in_[1], d = in_[2];
  float* dx = diff_src_.get(ctx).data();  // pooled storage: every token other than 0 is zeroed here
  std::fill(dx, dx + in_[0] * t * d, 0.0f);
  for (memory::dim i = 0; i < in_[0]; ++i) std::memcpy(dx + i * t * d, diff_dst.data() + i * d, d * sizeof(float));
  return diff_src_.current();
}

}  // namespace ddl
