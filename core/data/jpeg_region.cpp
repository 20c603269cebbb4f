#include "core/data/jpeg_region.hpp"

#include <algorithm>
#include <cmath>

#include "core/data/jpeg_errors.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

// What to decode: the DCT scale, and the rows and columns of the scaled image.
struct Plan {
  int scale = 1;
  int top = 0, rows = 0;             // rows [top, top + rows) of the scaled image
  JDIMENSION left = 0, columns = 0;  // columns, widened by libjpeg to whole blocks
};

// Rows or columns [first, end) of a scaled axis of `size` that bilinear sampling of [start, start + length)
// reads: one more on each side for the neighbours, within the image.
std::pair<int, int> span_of(float start, float length, int size) {
  const int first = std::max(0, static_cast<int>(std::floor(start)) - 1);
  const int end = std::min(size, static_cast<int>(std::ceil(start + length)) + 1);
  return {std::min(first, size - 1), std::max(end, std::min(first, size - 1) + 1)};
}

// The longjmp only unwinds libjpeg's C frames back into this one; `out` lives in the caller. No object with
// a destructor is declared here. region: false for the whole image at scale 1.
bool decode(std::span<const std::uint8_t> bytes, const CropBox& box, int out_h, int out_w, bool region,
            const JpegSize* expected, JpegRegion& out, char* message) {
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
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  // Before start_decompress, which allocates a whole image of coefficients for a progressive file.
  out.pixels.height = static_cast<int>(cinfo.image_height);
  out.pixels.width = static_cast<int>(cinfo.image_width);
  if (static_cast<std::uint64_t>(cinfo.image_height) * cinfo.image_width > kMaxImagePixels)
    jpeg::fail(reinterpret_cast<j_common_ptr>(&cinfo), "more pixels than ddl reads");
  if (expected && (expected->height != out.pixels.height || expected->width != out.pixels.width))
    jpeg::fail(reinterpret_cast<j_common_ptr>(&cinfo), "its size is not the one the dataset records");
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  Plan plan;
  while (region && plan.scale < 8 && box.height >= 2.0f * plan.scale * out_h && box.width >= 2.0f * plan.scale * out_w)
    plan.scale *= 2;
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(plan.scale);
  jpeg_start_decompress(&cinfo);
  const int height = static_cast<int>(cinfo.output_height), width = static_cast<int>(cinfo.output_width);
  const float s = static_cast<float>(plan.scale);
  const auto [top, bottom] = region ? span_of(box.top / s, box.height / s, height) : std::pair{0, height};
  const auto [left, right] = region ? span_of(box.left / s, box.width / s, width) : std::pair{0, width};
  plan.top = top;
  plan.rows = bottom - top;
  plan.left = static_cast<JDIMENSION>(left);
  plan.columns = static_cast<JDIMENSION>(right - left);
  if (plan.columns < cinfo.output_width) jpeg_crop_scanline(&cinfo, &plan.left, &plan.columns);
  const std::size_t columns = cinfo.output_width;  // after the crop: the columns each row holds
  const std::size_t row_bytes = columns * 3;
  out.scale = plan.scale;
  out.pixels.height = plan.rows;
  out.pixels.width = static_cast<int>(columns);
  // A CMYK row is 4 bytes a pixel, converted where it lands: the last one needs `columns` bytes more.
  out.pixels.rgb.resize(row_bytes * static_cast<std::size_t>(plan.rows) + (cmyk ? columns : 0));
  if (plan.top > 0 &&
      jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(plan.top)) != static_cast<JDIMENSION>(plan.top))
    jpeg::fail(reinterpret_cast<j_common_ptr>(&cinfo), "cannot skip to the crop's rows");
  for (int y = 0; y < plan.rows; ++y) {
    JSAMPROW row = out.pixels.rgb.data() + static_cast<std::size_t>(y) * row_bytes;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) jpeg::fail(reinterpret_cast<j_common_ptr>(&cinfo), "no scanline");
    if (cmyk) jpeg::cmyk_row_to_rgb(row, columns, cinfo.saw_Adobe_marker);
  }
  out.pixels.rgb.resize(row_bytes * static_cast<std::size_t>(plan.rows));
  // The rows below the box are not decoded: libjpeg's abort ends the decompression wherever it stands.
  if (region)
    jpeg_abort_decompress(&cinfo);
  else
    jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  out.box = {box.top / s - static_cast<float>(plan.top), box.left / s - static_cast<float>(plan.left), box.height / s,
             box.width / s};
  return true;
}

JpegRegion decode_or_throw(std::span<const std::uint8_t> bytes, const CropBox& box, int out_h, int out_w, bool region,
                           const JpegSize* expected, const std::string& name) {
  if (!is_jpeg(bytes)) throw InputError(name + ": not a JPEG");
  JpegRegion out;
  char message[JMSG_LENGTH_MAX] = "";
  if (!decode(bytes, box, out_h, out_w, region, expected, out, message)) {
    check_image_size(name, static_cast<std::uint64_t>(out.pixels.height), static_cast<std::uint64_t>(out.pixels.width));
    throw InputError(name + ": corrupt JPEG (" + message + ")");
  }
  return out;
}

}  // namespace

bool is_jpeg(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

JpegSize jpeg_size(std::span<const std::uint8_t> bytes, const std::string& name) {
  if (!is_jpeg(bytes)) throw InputError(name + ": not a JPEG");
  jpeg_decompress_struct cinfo;
  jpeg::ErrorManager err;
  jpeg_progress_mgr progress;
  jpeg::prepare(cinfo, err, progress);
  JpegSize size;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw InputError(name + ": corrupt JPEG (" + std::string(err.message) + ")");
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  size.height = static_cast<int>(cinfo.image_height);
  size.width = static_cast<int>(cinfo.image_width);
  jpeg_destroy_decompress(&cinfo);
  check_image_size(name, static_cast<std::uint64_t>(size.height), static_cast<std::uint64_t>(size.width));
  return size;
}

JpegRegion decode_jpeg_region(std::span<const std::uint8_t> bytes, const CropBox& box, int out_h, int out_w,
                              const std::string& name, const JpegSize* expected) {
  return decode_or_throw(bytes, box, out_h, out_w, true, expected, name);
}

DecodedImage decode_jpeg_bytes(std::span<const std::uint8_t> bytes, const std::string& name) {
  return decode_or_throw(bytes, {}, 0, 0, false, nullptr, name).pixels;
}

}  // namespace ddl
