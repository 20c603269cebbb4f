#include "core/data/image_decode.hpp"

#include <png.h>

#include <fstream>
#include <iterator>

#include "core/data/jpeg_errors.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool too_large(std::uint64_t height, std::uint64_t width) { return height * width > kMaxImagePixels; }

void check_pixel_count(const std::string& path, std::uint64_t height, std::uint64_t width) {
  if (too_large(height, width))
    throw InputError(path + ": image is " + std::to_string(height) + "x" + std::to_string(width) +
                     ", more than ddl reads (" + std::to_string(kMaxImagePixels) +
                     " pixels; corrupt, or scale it down first)");
}

// The longjmp only unwinds libjpeg's C frames back into this one; `out` lives in the caller, so growing it
// here is safe. No object with a destructor is declared in this function.
bool decode_jpeg_raw(const std::vector<unsigned char>& data, DecodedImage& out, char* message) {
  jpeg_decompress_struct cinfo;
  jpeg::ErrorManager err;
  jpeg_progress_mgr progress;
  jpeg::prepare(cinfo, err, progress);
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::snprintf(message, JMSG_LENGTH_MAX, "%s", err.message);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data.data(), static_cast<unsigned long>(data.size()));
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_calc_output_dimensions(&cinfo);
  out.height = static_cast<int>(cinfo.output_height);
  out.width = static_cast<int>(cinfo.output_width);
  // Before start_decompress, which allocates a whole image of coefficients for a progressive file.
  if (too_large(cinfo.output_height, cinfo.output_width)) jpeg::fail(reinterpret_cast<j_common_ptr>(&cinfo), "");
  jpeg_start_decompress(&cinfo);
  const std::size_t row_bytes = static_cast<std::size_t>(out.width) * 3;
  // A CMYK row is 4 bytes a pixel, converted where it lands: the last one needs `width` bytes more.
  out.rgb.resize(row_bytes * out.height + (cmyk ? out.width : 0));
  unsigned char* base = out.rgb.data();
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = base + cinfo.output_scanline * row_bytes;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) jpeg::fail(reinterpret_cast<j_common_ptr>(&cinfo), "no scanline");
    if (cmyk) jpeg::cmyk_row_to_rgb(row, out.width, cinfo.saw_Adobe_marker);
  }
  out.rgb.resize(row_bytes * out.height);
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

DecodedImage decode_jpeg(const std::string& path, const std::vector<unsigned char>& data) {
  DecodedImage out;
  char message[JMSG_LENGTH_MAX] = "";
  if (!decode_jpeg_raw(data, out, message)) {
    check_pixel_count(path, out.height, out.width);
    throw InputError(path + ": corrupt JPEG (" + message + ")");
  }
  return out;
}

DecodedImage decode_png(const std::string& path, const std::vector<unsigned char>& data) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data.data(), data.size()))
    throw InputError(path + ": corrupt PNG (" + image.message + ")");
  image.format = PNG_FORMAT_RGB;
  if (too_large(image.height, image.width)) {
    png_image_free(&image);
    check_pixel_count(path, image.height, image.width);
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

DecodedImage decode_image(const std::string& path) {
  const auto data = read_file(path);
  if (data.size() >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return decode_jpeg(path, data);
  if (data.size() >= 8 && png_sig_cmp(data.data(), 0, 8) == 0) return decode_png(path, data);
  throw InputError(path + ": neither a JPEG nor a PNG file");
}

}  // namespace ddl
