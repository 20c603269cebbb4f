// Bilinear resampling of a box of an HWC uint8 image, shared by the importer (--resize) and the loader
// (random-resized-crop, and resizing stored images to the model's input size). Pixel centres are aligned
// as in torchvision and PIL (align_corners = false); no antialiasing filter, so shrinking by more than
// 2x keeps less detail than PIL's resize would (as OpenCV's INTER_LINEAR).
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.hpp"

namespace ddl {

// A region of the source image, in pixels (fractional allowed).
struct CropBox {
  float top = 0, left = 0, height = 0, width = 0;
};

// The two source pixels and the weight of the second for every output position along one axis.
struct AxisSampler {
  std::vector<int> first, second;
  std::vector<float> weight;
  AxisSampler(float start, float length, int out, int source_size);
};

// Resamples `box` of src (h x w x channels) to out_h x out_w; calls emit(y, x, channel, value) with value
// in pixel units [0, 255], so callers choose the output layout and scaling.
template <typename Emit>
void resample(const std::uint8_t* src, int h, int w, int channels, const CropBox& box, int out_h, int out_w,
              Emit&& emit) {
  const AxisSampler ys(box.top, box.height, out_h, h), xs(box.left, box.width, out_w, w);
  for (int y = 0; y < out_h; ++y) {
    const std::uint8_t* row0 = src + static_cast<std::size_t>(ys.first[y]) * w * channels;
    const std::uint8_t* row1 = src + static_cast<std::size_t>(ys.second[y]) * w * channels;
    const float wy = ys.weight[y];
    for (int x = 0; x < out_w; ++x) {
      const int x0 = xs.first[x] * channels, x1 = xs.second[x] * channels;
      const float wx = xs.weight[x];
      for (int k = 0; k < channels; ++k) {
        const float top = row0[x0 + k] + wx * (row0[x1 + k] - row0[x0 + k]);
        const float bottom = row1[x0 + k] + wx * (row1[x1 + k] - row1[x0 + k]);
        emit(y, x, k, top + wy * (bottom - top));
      }
    }
  }
}

// torchvision's Resize(size) + CenterCrop(size): the shorter side scaled to `size`, the centre kept.
CropBox center_square(int h, int w);

// torchvision's RandomResizedCrop box: area a uniform fraction of the image in [min_area, 1], aspect
// ratio log-uniform in [3/4, 4/3]; ten tries, then the whole image cropped to the nearest allowed ratio.
CropBox random_resized_crop(int h, int w, Rng& rng, float min_area = 0.08f);

// out_h x out_w x channels uint8 from a box of src.
std::vector<std::uint8_t> resize_image(const std::uint8_t* src, int h, int w, int channels, const CropBox& box,
                                       int out_h, int out_w);

}  // namespace ddl
