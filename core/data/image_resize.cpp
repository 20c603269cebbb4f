#include "core/data/image_resize.hpp"

#include <algorithm>
#include <cmath>

namespace ddl {

AxisSampler::AxisSampler(float start, float length, int out, int source_size)
    : first(out), second(out), weight(out) {
  const float step = length / static_cast<float>(out);
  for (int i = 0; i < out; ++i) {
    const float s = std::clamp(start + (static_cast<float>(i) + 0.5f) * step - 0.5f, 0.0f,
                               static_cast<float>(source_size - 1));
    first[i] = static_cast<int>(std::floor(s));
    second[i] = std::min(first[i] + 1, source_size - 1);
    weight[i] = s - static_cast<float>(first[i]);
  }
}

CropBox center_square(int h, int w) {
  const float side = static_cast<float>(std::min(h, w));
  return {(static_cast<float>(h) - side) / 2, (static_cast<float>(w) - side) / 2, side, side};
}

CropBox random_resized_crop(int h, int w, Rng& rng, float min_area) {
  const float area = static_cast<float>(h) * static_cast<float>(w);
  const float log_lo = std::log(3.0f / 4.0f), log_hi = std::log(4.0f / 3.0f);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const float target = area * rng.uniform(min_area, 1.0f);
    const float ratio = std::exp(rng.uniform(log_lo, log_hi));
    const int cw = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const int ch = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (cw > 0 && ch > 0 && cw <= w && ch <= h) {
      const int top = static_cast<int>(rng.below(static_cast<std::uint64_t>(h - ch + 1)));
      const int left = static_cast<int>(rng.below(static_cast<std::uint64_t>(w - cw + 1)));
      return {static_cast<float>(top), static_cast<float>(left), static_cast<float>(ch), static_cast<float>(cw)};
    }
  }
  const float ratio = static_cast<float>(w) / static_cast<float>(h);
  float ch = static_cast<float>(h), cw = static_cast<float>(w);
  if (ratio < 3.0f / 4.0f) ch = std::round(cw / (3.0f / 4.0f));
  if (ratio > 4.0f / 3.0f) cw = std::round(ch * (4.0f / 3.0f));
  return {(static_cast<float>(h) - ch) / 2, (static_cast<float>(w) - cw) / 2, ch, cw};
}

std::vector<std::uint8_t> resize_image(const std::uint8_t* src, int h, int w, int channels, const CropBox& box,
                                       int out_h, int out_w) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(out_h) * out_w * channels);
  resample(src, h, w, channels, box, out_h, out_w, [&](int y, int x, int k, float v) {
    out[(static_cast<std::size_t>(y) * out_w + x) * channels + k] = static_cast<std::uint8_t>(std::lround(v));
  });
  return out;
}

}  // namespace ddl
