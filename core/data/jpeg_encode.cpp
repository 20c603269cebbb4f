#include "core/data/jpeg_encode.hpp"

#include "core/data/jpeg_errors.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

// libjpeg's output appended to a vector the caller owns (jpeg_mem_dest frees and moves its own buffer as it
// grows, which an error in the middle would leave to be freed twice).
struct VectorDestination {
  jpeg_destination_mgr base;
  std::vector<std::uint8_t>* out;
  static constexpr std::size_t kBlock = 64 << 10;
};

void start_destination(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<VectorDestination*>(cinfo->dest);
  d->out->resize(VectorDestination::kBlock);
  d->base.next_output_byte = d->out->data();
  d->base.free_in_buffer = d->out->size();
}

boolean grow_destination(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<VectorDestination*>(cinfo->dest);
  const std::size_t used = d->out->size();  // libjpeg calls this when the whole buffer is full
  d->out->resize(used + VectorDestination::kBlock);
  d->base.next_output_byte = d->out->data() + used;
  d->base.free_in_buffer = VectorDestination::kBlock;
  return TRUE;
}

void end_destination(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<VectorDestination*>(cinfo->dest);
  d->out->resize(d->out->size() - d->base.free_in_buffer);
}

// The longjmp comes back here; `out` lives in the caller. No object with a destructor is declared here.
bool encode(const std::uint8_t* rgb, int h, int w, int quality, std::vector<std::uint8_t>& out, char* message) {
  jpeg_compress_struct cinfo;
  jpeg::ErrorManager err;
  VectorDestination destination{{}, &out};
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = jpeg::error_exit;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::snprintf(message, JMSG_LENGTH_MAX, "%s", err.message);
    return false;
  }
  jpeg_create_compress(&cinfo);
  destination.base.init_destination = start_destination;
  destination.base.empty_output_buffer = grow_destination;
  destination.base.term_destination = end_destination;
  cinfo.dest = &destination.base;
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
  std::vector<std::uint8_t> out;
  char message[JMSG_LENGTH_MAX] = "";
  if (!encode(rgb, h, w, quality, out, message)) throw Error(std::string("JPEG encoding failed: ") + message);
  return out;
}

}  // namespace ddl
