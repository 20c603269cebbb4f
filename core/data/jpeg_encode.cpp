#include "core/data/jpeg_encode.hpp"

#include <cstdlib>

#include "core/data/jpeg_errors.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

// libjpeg allocates the output itself (jpeg_mem_dest); the longjmp comes back here, where it is freed.
bool encode(const std::uint8_t* rgb, int h, int w, int quality, unsigned char*& buffer, unsigned long& size,
            char* message) {
  jpeg_compress_struct cinfo;
  jpeg::ErrorManager err;
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = jpeg::error_exit;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::snprintf(message, JMSG_LENGTH_MAX, "%s", err.message);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    auto* row = const_cast<JSAMPROW>(rgb + static_cast<std::size_t>(cinfo.next_scanline) * w * 3);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

}  // namespace

std::vector<std::uint8_t> encode_jpeg(const std::uint8_t* rgb, int h, int w, int quality) {
  if (h <= 0 || w <= 0 || h > 65500 || w > 65500)
    throw InputError("cannot encode a " + std::to_string(h) + "x" + std::to_string(w) + " image as JPEG");
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  char message[JMSG_LENGTH_MAX] = "";
  const bool done = encode(rgb, h, w, quality, buffer, size, message);
  std::vector<std::uint8_t> out;
  if (done) out.assign(buffer, buffer + size);
  std::free(buffer);
  if (!done) throw Error(std::string("JPEG encoding failed: ") + message);
  return out;
}

}  // namespace ddl
