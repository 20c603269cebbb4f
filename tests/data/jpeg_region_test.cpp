// Decoding a crop's region of a JPEG (jpeg_region.hpp) against decoding the whole image and resampling the
// same box: at scale 1 the same pixels, at the DCT scales those of the image's block means.
#include "core/data/jpeg_region.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include "core/data/jpeg_encode.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

// A photo-like image: smooth gradients with a few edges, h x w x 3.
std::vector<std::uint8_t> scene(int h, int w) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const double r = 128 + 100 * std::sin(x / 37.0) * std::cos(y / 23.0);
      const double g = (x + 2 * y) % 255;
      const double b = (x / 50 + y / 40) % 2 ? 200 : 60;  // blocks with edges
      for (int c = 0; c < 3; ++c)
        rgb[(static_cast<std::size_t>(y) * w + x) * 3 + c] = static_cast<std::uint8_t>(c == 0 ? r : c == 1 ? g : b);
    }
  return rgb;
}

std::vector<float> resampled(const DecodedImage& image, const CropBox& box, int out) {
  std::vector<float> v(static_cast<std::size_t>(out) * out * 3);
  resample(image.rgb.data(), image.height, image.width, 3, box, out, out,
           [&](int y, int x, int k, float value) { v[(static_cast<std::size_t>(y) * out + x) * 3 + k] = value; });
  return v;
}

// The image shrunk by s, each pixel the mean of its s x s block (the last ones of what is left): what
// libjpeg's DCT scaling computes, up to the transform's rounding.
DecodedImage block_means(const DecodedImage& image, int s) {
  DecodedImage out;
  out.height = (image.height + s - 1) / s;
  out.width = (image.width + s - 1) / s;
  out.rgb.resize(static_cast<std::size_t>(out.height) * out.width * 3);
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x)
      for (int k = 0; k < 3; ++k) {
        double sum = 0;
        int n = 0;
        for (int dy = 0; dy < s && y * s + dy < image.height; ++dy)
          for (int dx = 0; dx < s && x * s + dx < image.width; ++dx, ++n)
            sum += image.rgb[(static_cast<std::size_t>(y * s + dy) * image.width + x * s + dx) * 3 + k];
        out.rgb[(static_cast<std::size_t>(y) * out.width + x) * 3 + k] =
            static_cast<std::uint8_t>(std::lround(sum / n));
      }
  return out;
}

double mean_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += std::abs(a[i] - b[i]);
  return sum / static_cast<double>(a.size());
}

TEST(JpegRegion, TheBoxesPixelsAsAWholeDecodeGivesThem) {
  const int h = 375, w = 500;
  const auto bytes = encode_jpeg(scene(h, w).data(), h, w, 90);
  const JpegSize size = jpeg_size(bytes, "scene.jpg");
  EXPECT_EQ(size.height, h);
  EXPECT_EQ(size.width, w);
  const DecodedImage whole = decode_jpeg_bytes(bytes, "scene.jpg");
  ASSERT_EQ(whole.height, h);
  struct Case {
    CropBox box;
    int out, scale;
    double tolerance;  // mean absolute difference, in pixel values (a box one pixel off: 2.8 to 14)
  };
  const Case cases[] = {
      {{10.5f, 20.25f, 150.0f, 180.0f}, 224, 1, 0.01},   // smaller than the output: scale 1, same pixels
      {{100.0f, 333.0f, 120.0f, 160.0f}, 112, 1, 0.01},  // on the right edge
      {{0.0f, 0.0f, 375.0f, 500.0f}, 160, 2, 2.0},       // the whole image at 1/2
      {{37.0f, 61.0f, 300.0f, 400.0f}, 64, 4, 2.0},      // 1/4
      {{5.0f, 7.0f, 360.0f, 480.0f}, 32, 8, 2.0},        // 1/8
  };
  for (const Case& c : cases) {
    const JpegRegion region = decode_jpeg_region(bytes, c.box, c.out, c.out, "scene.jpg");
    EXPECT_EQ(region.scale, c.scale);
    // Only the box's rows, and columns to whole blocks, at most 8 pixels of margin a side.
    EXPECT_LE(region.pixels.height, static_cast<int>(c.box.height / c.scale) + 3);
    EXPECT_LE(region.pixels.width, static_cast<int>(c.box.width / c.scale) + 2 * 8 + 3);
    const float s = static_cast<float>(c.scale);
    const CropBox scaled{c.box.top / s, c.box.left / s, c.box.height / s, c.box.width / s};
    const double d = mean_difference(resampled(region.pixels, region.box, c.out),
                                     resampled(block_means(whole, c.scale), scaled, c.out));
    EXPECT_LE(d, c.tolerance) << "box at " << c.box.top << "," << c.box.left << " to " << c.out;
  }
}

// Against torchvision's resized_crop (PIL's crop, then its bilinear resize, which antialiases when it
// shrinks) of boxes of a JPEG that PIL wrote (tests/data/pil_reference/make_reference.py): the decoded and
// resampled box within a few levels on average, what JPEG decoders and the two resampling filters differ by.
TEST(JpegRegion, ABoxIsWhatTorchvisionMakesOfIt) {
  const std::string dir = std::string(DDL_SOURCE_DIR) + "/tests/data/pil_reference/";
  std::ifstream in(dir + "scene.jpg", std::ios::binary);
  const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  ASSERT_GT(bytes.size(), 1000u);
  struct Box {
    CropBox box;
    int out;
    double tolerance;  // mean absolute difference, pixel levels
  };
  // Upscaled; upscaled at the right edge; shrunk 1.9x at scale 1 (PIL antialiases, ddl samples); 4.7x by the
  // 1/4 DCT scale; 11x by the 1/8 scale.
  // Measured (AMD EPYC, libjpeg-turbo 2.1.5): 0.28, 0.60, 2.08, 2.25, 4.44.
  const Box boxes[] = {{{10, 20, 80, 90}, 112, 1.0},
                       {{100, 333, 120, 160}, 112, 1.5},
                       {{0, 0, 375, 500}, 160, 3.0},
                       {{37, 61, 300, 400}, 64, 3.5},
                       {{5, 7, 360, 480}, 32, 6.0}};
  for (std::size_t i = 0; i < std::size(boxes); ++i) {
    const Box& b = boxes[i];
    std::ifstream ref_in(dir + "box_" + std::to_string(i) + ".rgb", std::ios::binary);
    const std::vector<std::uint8_t> ref{std::istreambuf_iterator<char>(ref_in), std::istreambuf_iterator<char>()};
    ASSERT_EQ(ref.size(), static_cast<std::size_t>(b.out) * b.out * 3);
    const JpegRegion region = decode_jpeg_region(bytes, b.box, b.out, b.out, "scene.jpg");
    const std::vector<float> ours = resampled(region.pixels, region.box, b.out);
    double diff = 0;
    for (std::size_t k = 0; k < ref.size(); ++k) diff += std::abs(ours[k] - static_cast<float>(ref[k]));
    diff /= static_cast<double>(ref.size());
    EXPECT_LE(diff, b.tolerance) << "box " << i;
  }
}

TEST(JpegRegion, DamagedBytesAreNamed) {
  const auto bytes = encode_jpeg(scene(64, 64).data(), 64, 64, 90);
  const std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2));
  try {
    decode_jpeg_region(cut, {0, 0, 64, 64}, 32, 32, "cut.jpg");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cut.jpg: corrupt JPEG"), std::string::npos) << e.what();
  }
  const std::vector<std::uint8_t> png = {0x89, 'P', 'N', 'G'};
  EXPECT_THROW(jpeg_size(png, "x.png"), InputError);
  EXPECT_THROW(decode_jpeg_bytes({}, "empty.jpg"), InputError);
}

}  // namespace
}  // namespace ddl
