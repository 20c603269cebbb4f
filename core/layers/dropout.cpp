#include "core/layers/dropout.hpp"

#include <cstdio>
#include <cstring>

#include "core/bf16.hpp"
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
    mask_ = AlignedBuffer<float>(src_md.get_size() / dnnl::memory::data_type_size(data_type_of(src_md)));
    if (need_diff_src) diff_src_.reset(src_md);
  }
  return src_md;
}

// y = x * mask, element by element over the storage, in the tensors' own type (f32, or bf16).
void Dropout::apply_mask(const Tensor& x, Tensor& y) const {
  const std::size_t n = mask_.size();
  if (x.data_type() == DataType::bf16) {
    const auto* in = static_cast<const std::uint16_t*>(x.memory().get_data_handle());
    auto* out = static_cast<std::uint16_t*>(y.memory().get_data_handle());
    for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(from_bf16(in[i]) * mask_[i]);
  } else {
    const float* in = x.data();
    float* out = y.data();
    for (std::size_t i = 0; i < n; ++i) out[i] = in[i] * mask_[i];
  }
}

const Tensor& Dropout::forward(Context& ctx, const Tensor& src) {
  Tensor& dst = output_.get(ctx);
  if (mode_ == Mode::infer || p_ == 0.0f) {
    std::memcpy(dst.memory().get_data_handle(), src.memory().get_data_handle(), src.bytes());
    return dst;
  }
  rng_.set_state(rng_state_);
  const float scale = 1.0f / (1.0f - p_);
  for (float& m : mask_.span()) m = rng_.uniform() < p_ ? 0.0f : scale;
  rng_state_ = rng_.state();
  apply_mask(src, dst);
  return dst;
}

const Tensor& Dropout::backward(Context& ctx, const Tensor& diff_dst) {
  if (mode_ != Mode::train) throw Error("dropout: backward called on a layer set up for inference");
  if (!need_diff_src_) return diff_src_.current();
  Tensor& dx = diff_src_.get(ctx);
  if (p_ == 0.0f)
    std::memcpy(dx.memory().get_data_handle(), diff_dst.memory().get_data_handle(), diff_dst.bytes());
  else
    apply_mask(diff_dst, dx);
  return diff_src_.current();
}

std::vector<StateView> Dropout::state() { return {{"rng", {}, std::span<std::uint64_t>(rng_state_)}}; }

}  // namespace ddl
