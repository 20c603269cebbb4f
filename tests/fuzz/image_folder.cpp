// Fuzz target: an image-folder import (ddl_data import --from DIR) of one JPEG or PNG file, as corrupt or
// truncated as the fuzzer makes it. The first input byte chooses how: bit 0 resizes every image to 5x5
// (import --resize), bit 1 adds a second class holding the same file under another name and decodes on two
// threads; the rest is the file, named x.jpg (the decoder goes by the bytes, not the name). A successful
// import is then split and written as a dataset, as the import does.
//
// Inputs whose header claims over a million pixels are skipped, as libjpeg-turbo's own fuzzers skip them:
// decoding them is the same code at a size where each input takes seconds (up to ddl's limit of
// kMaxImagePixels, whose refusal before allocating is a unit test).
#include <png.h>
#include <stdio.h>
// jpeglib.h needs stdio's FILE declared before it.
#include <jpeglib.h>

#include <csetjmp>
#include <cstdint>
#include <filesystem>

#include "core/data/dataset_writer.hpp"
#include "core/data/hdf5.hpp"
#include "core/data/image_folder.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

struct JpegError {
  jpeg_error_mgr base;
  std::jmp_buf jump;
};

// Width x height from a JPEG header; 0 when the header does not parse (the import then says why).
std::uint64_t jpeg_pixels(const std::uint8_t* data, std::size_t size) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = [](j_common_ptr c) { std::longjmp(reinterpret_cast<JpegError*>(c->err)->jump, 1); };
  err.base.emit_message = [](j_common_ptr, int) {};
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return 0;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const std::uint64_t pixels = std::uint64_t{cinfo.image_width} * cinfo.image_height;
  jpeg_destroy_decompress(&cinfo);
  return pixels;
}

std::uint64_t png_pixels(const std::uint8_t* data, std::size_t size) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size)) return 0;
  const std::uint64_t pixels = std::uint64_t{image.width} * image.height;
  png_image_free(&image);
  return pixels;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ddl::h5::no_cleanup_at_exit();
  ddl::fuzz::set_up_hdf5();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  if (jpeg_pixels(data + 1, size - 1) > 1'000'000 || png_pixels(data + 1, size - 1) > 1'000'000) return 0;
  const std::string root = ddl::fuzz::scratch() + "/images";
  std::error_code ignored;
  std::filesystem::remove_all(root, ignored);
  ddl::fuzz::write_file(root + "/a/x.jpg", data + 1, size - 1);
  if (mode & 2) ddl::fuzz::write_file(root + "/b/y.png", data + 1, size - 1);
  ddl::fuzz::expect_success_or_input_error([&] {
    const ddl::ImageSet set = ddl::import_image_folder(root, mode & 2 ? 2 : 1, mode & 1 ? 5 : 0);
    auto [train, val] = ddl::shuffle_split(set, mode & 2 ? 0.5 : 0.0, 1);
    if (train.pixels.size() <= (1 << 20)) ddl::write_image_dataset(train, ddl::fuzz::scratch() + "/out.h5", 1);
  });
  ddl::fuzz::expect_no_open_hdf5_objects();
  return 0;
}
