// Test fixtures made at test time: a temporary directory, small synthetic image sets, and image files
// written with libpng / libjpeg.
#pragma once

#include <jpeglib.h>
#include <png.h>
#include <stdio.h>

#include <filesystem>
#include <random>
#include <string>

#include "core/data/image_set.hpp"

namespace ddl::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ddl_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Image i has every pixel of channel c equal to (i * 7 + c * 3 + y + x) % 256: easy to check anywhere.
inline std::uint8_t pattern(std::size_t i, int y, int x, int c) {
  return static_cast<std::uint8_t>((i * 7 + c * 3 + y + x) % 256);
}

inline ImageSet pattern_set(std::size_t n, int h, int w, int classes) {
  ImageSet set{h, w, 3, {}, {}, {}};
  for (int c = 0; c < classes; ++c) set.class_names.push_back("class" + std::to_string(c));
  set.pixels.resize(n * set.image_bytes());
  for (std::size_t i = 0; i < n; ++i) {
    set.labels.push_back(static_cast<std::int32_t>(i % classes));
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c) set.pixels[((i * h + y) * w + x) * 3 + c] = pattern(i, y, x, c);
  }
  return set;
}

inline void write_png(const std::string& path, int h, int w, std::size_t seed) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) rgb[(y * w + x) * 3 + c] = pattern(seed, y, x, c);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = w;
  image.height = h;
  image.format = PNG_FORMAT_RGB;
  png_image_write_to_file(&image, path.c_str(), 0, rgb.data(), 0, nullptr);
}

inline void write_jpeg(const std::string& path, int h, int w, int quality = 95) {
  FILE* f = std::fopen(path.c_str(), "wb");
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = w;
  cinfo.image_height = h;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<std::uint8_t> row(static_cast<std::size_t>(w) * 3, 128);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

}  // namespace ddl::test
