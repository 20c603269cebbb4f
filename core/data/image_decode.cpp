#include "core/data/image_decode.hpp"

#include <png.h>

#include <fstream>
#include <iterator>

#include "core/data/jpeg_region.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

bool too_large(std::uint64_t height, std::uint64_t width) { return height * width > kMaxImagePixels; }

DecodedImage decode_png(const std::string& path, const std::vector<unsigned char>& data) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data.data(), data.size()))
    throw InputError(path + ": corrupt PNG (" + image.message + ")");
  image.format = PNG_FORMAT_RGB;
  if (too_large(image.height, image.width)) {
    png_image_free(&image);
    check_image_size(path, image.height, image.width);
  }
  DecodedImage out;
  out.height = static_cast<int>(image.height);
  out.width = static_cast<int>(image.width);
  out.rgb.resize(static_cast<std::size_t>(out.width) * out.height * 3);
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr)) {
    std::string message = image.message;
    png_image_free(&image);
    throw InputError(path + ": corrupt PNG (" + message + ")");
  }
  return out;
}

}  // namespace

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void check_image_size(const std::string& name, std::uint64_t height, std::uint64_t width) {
  if (too_large(height, width))
    throw InputError(name + ": image is " + std::to_string(height) + "x" + std::to_string(width) +
                     ", more than ddl reads (" + std::to_string(kMaxImagePixels) +
                     " pixels; corrupt, or scale it down first)");
}

DecodedImage decode_image(const std::string& path) {
  const auto data = read_file(path);
  if (is_jpeg(data)) return decode_jpeg_bytes(data, path);
  if (data.size() >= 8 && png_sig_cmp(data.data(), 0, 8) == 0) return decode_png(path, data);
  throw InputError(path + ": neither a JPEG nor a PNG file");
}

}  // namespace ddl
