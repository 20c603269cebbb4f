#include "core/data/image_decode.hpp"

#include <png.h>
#include <stdio.h>
// jpeglib.h needs stdio's FILE declared before it.
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <fstream>
#include <iterator>

#include "core/error.hpp"

namespace ddl {
namespace {

// A progressive JPEG may hold any number of scans, each a pass over the whole image: a small file of
// thousands of them decodes for minutes. libjpeg-turbo's own tools cap them (djpeg -maxscans, TurboJPEG's
// scan limit, 500 in its fuzzers); real encoders write about 10.
constexpr int kMaxJpegScans = 500;

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

// libjpeg reports errors by calling error_exit, which must not return: jump back to decode_jpeg.
struct JpegErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo, const char* message) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  std::snprintf(err->message, sizeof err->message, "%s", message);
  std::longjmp(err->jump, 1);
}

void jpeg_error_exit(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  jpeg_fail(cinfo, message);
}

// libjpeg only warns about most damage and goes on. Image data that ends early (the file does, or a marker
// interrupts it) would become an image whose missing part is grey, which must not end up in a training set
// unnoticed: those warnings are errors. Others (stray bytes between markers) leave the image whole.
void jpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(cinfo, "the file ends early (truncated)");
  if (cinfo->err->msg_code == JWRN_HIT_MARKER) jpeg_fail(cinfo, "the image data ends early (truncated or corrupt)");
}

void jpeg_scan_limit(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxJpegScans) jpeg_fail(cinfo, "more than 500 progressive scans");
}

// CMYK (and YCCK, which libjpeg turns into CMYK) to RGB, in place: pixel x's 4 bytes are read before
// pixel x's 3 are written, and 3x <= 4x, so nothing is overwritten before it is read. Adobe's encoders
// (the source of nearly every CMYK JPEG) store the values inverted and say so with their marker.
void cmyk_row_to_rgb(unsigned char* row, std::size_t width, bool inverted) {
  for (std::size_t x = 0; x < width; ++x) {
    const unsigned char* in = row + 4 * x;
    const unsigned ink = inverted ? in[3] : 255u - in[3];  // 255 - K: how much light the black ink lets through
    unsigned char rgb[3];
    for (int c = 0; c < 3; ++c) {
      const unsigned light = inverted ? in[c] : 255u - in[c];
      rgb[c] = static_cast<unsigned char>((light * ink + 127) / 255);
    }
    for (int c = 0; c < 3; ++c) row[3 * x + c] = rgb[c];
  }
}

// The longjmp only unwinds libjpeg's C frames back into this one; `out` lives in the caller, so growing it
// here is safe. No object with a destructor is declared in this function.
bool decode_jpeg_raw(const std::vector<unsigned char>& data, DecodedImage& out, char* message) {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  jpeg_progress_mgr progress;
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = jpeg_error_exit;
  err.base.emit_message = jpeg_emit_message;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::snprintf(message, JMSG_LENGTH_MAX, "%s", err.message);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = jpeg_scan_limit;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data.data(), static_cast<unsigned long>(data.size()));
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_calc_output_dimensions(&cinfo);
  out.height = static_cast<int>(cinfo.output_height);
  out.width = static_cast<int>(cinfo.output_width);
  // Before start_decompress, which allocates a whole image of coefficients for a progressive file.
  if (too_large(cinfo.output_height, cinfo.output_width)) jpeg_fail(reinterpret_cast<j_common_ptr>(&cinfo), "");
  jpeg_start_decompress(&cinfo);
  const std::size_t row_bytes = static_cast<std::size_t>(out.width) * 3;
  // A CMYK row is 4 bytes a pixel, converted where it lands: the last one needs `width` bytes more.
  out.rgb.resize(row_bytes * out.height + (cmyk ? out.width : 0));
  unsigned char* base = out.rgb.data();
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = base + cinfo.output_scanline * row_bytes;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) jpeg_fail(reinterpret_cast<j_common_ptr>(&cinfo), "no scanline");
    if (cmyk) cmyk_row_to_rgb(row, out.width, cinfo.saw_Adobe_marker);
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
