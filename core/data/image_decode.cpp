#include "core/data/image_decode.hpp"

#include <png.h>
#include <stdio.h>
// jpeglib.h needs stdio's FILE declared before it.
#include <jpeglib.h>

#include <csetjmp>
#include <fstream>
#include <iterator>

#include "core/error.hpp"

namespace ddl {
namespace {

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// libjpeg reports errors by calling error_exit, which must not return: jump back to decode_jpeg.
struct JpegErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// The longjmp only unwinds libjpeg's C frames back into this one; `out` lives in the caller, so growing it
// here is safe. No object with a destructor is declared in this function.
bool decode_jpeg_raw(const std::vector<unsigned char>& data, DecodedImage& out, char* message) {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = jpeg_error_exit;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::snprintf(message, JMSG_LENGTH_MAX, "%s", err.message);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data.data(), static_cast<unsigned long>(data.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out.height = static_cast<int>(cinfo.output_height);
  out.width = static_cast<int>(cinfo.output_width);
  const std::size_t row_bytes = static_cast<std::size_t>(out.width) * 3;
  out.rgb.resize(row_bytes * out.height);
  unsigned char* base = out.rgb.data();
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = base + cinfo.output_scanline * row_bytes;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

DecodedImage decode_jpeg(const std::string& path, const std::vector<unsigned char>& data) {
  DecodedImage out;
  char message[JMSG_LENGTH_MAX] = "";
  if (!decode_jpeg_raw(data, out, message)) throw InputError(path + ": corrupt JPEG (" + message + ")");
  return out;
}

DecodedImage decode_png(const std::string& path, const std::vector<unsigned char>& data) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data.data(), data.size()))
    throw InputError(path + ": corrupt PNG (" + image.message + ")");
  image.format = PNG_FORMAT_RGB;
  DecodedImage out;
  out.height = static_cast<int>(image.height);
  out.width = static_cast<int>(image.width);
  out.rgb.resize(PNG_IMAGE_SIZE(image));
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
