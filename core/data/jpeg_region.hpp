// Decoding only what a crop needs: the rows and (whole-block) columns of a box of a JPEG, at the coarsest
// of libjpeg's DCT scales 1, 1/2, 1/4 and 1/8 that keeps the box at least the output's size. A
// random-resized-crop to 224 of a 500 x 375 photo decodes its box's rows at 1/2 scale, not the whole image:
// the loader's decode fused with its augmentation (batch_loader.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/data/image_decode.hpp"
#include "core/data/image_resize.hpp"

namespace ddl {

struct JpegSize {
  int height = 0, width = 0;
};

// A JPEG's size from its header, no pixels decoded; throws InputError naming `name` where the bytes are no
// JPEG or it is larger than kMaxImagePixels.
JpegSize jpeg_size(std::span<const std::uint8_t> bytes, const std::string& name);

// The decoded region (8-bit RGB) and the box in its pixels, for resample() to out_h x out_w.
struct JpegRegion {
  DecodedImage pixels;
  CropBox box;
  int scale = 1;  // the region is 1/scale of the image's size
};

// `box` is in the image's pixels. Throws InputError naming `name` for a corrupt or truncated JPEG, or one of
// another size than `expected` where that is given (a dataset's record of it).
JpegRegion decode_jpeg_region(std::span<const std::uint8_t> bytes, const CropBox& box, int out_h, int out_w,
                              const std::string& name, const JpegSize* expected = nullptr);
// Whether the bytes start as a JPEG file does (its start-of-image marker).
bool is_jpeg(std::span<const std::uint8_t> bytes);
// The whole image (scale 1), from bytes in memory.
DecodedImage decode_jpeg_bytes(std::span<const std::uint8_t> bytes, const std::string& name);

}  // namespace ddl
