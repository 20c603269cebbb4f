#include "core/layers/dropout.hpp"

#include <cstdio>

#include "core/error.hpp"

namespace ddl {

Dropout::Dropout(float p, std::uint64_t seed) : p_(p), rng_(seed), rng_state_(rng_.state()) {
  if (!(p >= 0.0f && p < 1.0f)) throw InputError("dropout: probability must be in [0, 1)");
}

std::string Dropout::describe() const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "dropout p=%.2f", p_);
  return buf;
}

dnnl::memory::desc Dropout::setup(Context& ctx, const dnnl::memory::desc& src_md, Mode mode, bool need_diff_src) {
  mode_ = mode;
  need_diff_src_ = need_diff_src;
  reset_output(ctx, src_md);
  if (mode == Mode::train) {
    // Element-wise, so it works on the storage of any layout, padding included (zeros stay zero).
    mask_ = AlignedBuffer<float>(src_md.get_size() / sizeof(float));
    if (need_diff_src) diff_src_.reset(src_md);
  }
  return src_md;
}

const Tensor& Dropout::forward(Context& ctx, const Tensor& src) {
  const std::size_t n = src.bytes() / sizeof(float);
  const float* x = src.data();
  Tensor& dst = output_.get(ctx);
  float* y = dst.data();
  if (mode_ == Mode::infer || p_ == 0.0f) {
    std::copy(x, x + n, y);
    return dst;
  }
  rng_.set_state(rng_state_);
  const float scale = 1.0f / (1.0f - p_);
  for (std::size_t i = 0; i < n; ++i) {
    mask_[i] = rng_.uniform() < p_ ? 0.0f : scale;
    y[i] = x[i] * mask_[i];
  }
  rng_state_ = rng_.state();
  return dst;
}

const Tensor& Dropout::backward(Context& ctx, const Tensor& diff_dst) {
  if (mode_ != Mode::train) throw Error("dropout: backward called on a layer set up for inference");
  if (!need_diff_src_) return diff_src_.current();
  const std::size_t n = diff_dst.bytes() / sizeof(float);
  const float* dy = diff_dst.data();
  float* dx = diff_src_.get(ctx).data();
  if (p_ == 0.0f) {
    std::copy(dy, dy + n, dx);
  } else {
    for (std::size_t i = 0; i < n; ++i) dx[i] = dy[i] * mask_[i];
  }
  return diff_src_.current();
}

std::vector<StateView> Dropout::state() { return {{"rng", {}, std::span<std::uint64_t>(rng_state_)}}; }

}  // namespace ddl
