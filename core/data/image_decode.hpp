// Decodes a JPEG (libjpeg-turbo) or PNG (libpng) file to 8-bit RGB, [H, W, 3] row-major. Grey and
// palette images are expanded to RGB; alpha is dropped; CMYK JPEGs are converted. Errors throw InputError
// with the file name: corrupt and truncated files, and images over kMaxImagePixels, whose headers alone
// would otherwise size the allocation (a damaged or hostile header may claim 65,535 x 65,535 for JPEG, or
// libpng's limit of 1,000,000 x 1,000,000).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddl {

// 100 million pixels (10,000 x 10,000, 300 MB as RGB): above any training image. Pillow's bomb guard
// warns from 89 million.
inline constexpr std::uint64_t kMaxImagePixels = 100'000'000;

struct DecodedImage {
  int height = 0, width = 0;
  std::vector<std::uint8_t> rgb;
};

DecodedImage decode_image(const std::string& path);
// A file's bytes; InputError naming it where it cannot be opened.
std::vector<std::uint8_t> read_file(const std::string& path);
// Throws InputError naming `name` where height x width is more than kMaxImagePixels.
void check_image_size(const std::string& name, std::uint64_t height, std::uint64_t width);

}  // namespace ddl
