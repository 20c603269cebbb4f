// Decodes a JPEG (libjpeg-turbo) or PNG (libpng) file to 8-bit RGB, [H, W, 3] row-major. Grey and
// palette images are expanded to RGB; alpha is dropped. Errors throw with the file name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddl {

struct DecodedImage {
  int height = 0, width = 0;
  std::vector<std::uint8_t> rgb;
};

DecodedImage decode_image(const std::string& path);

}  // namespace ddl
