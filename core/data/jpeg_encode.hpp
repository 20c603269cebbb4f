// 8-bit RGB to JPEG bytes (libjpeg-turbo, 4:2:0 as PIL and libjpeg's defaults write): how the importer keeps
// PNG inputs and images larger than --max-side in an encoded dataset, and how the test data is made.
#pragma once

#include <cstdint>
#include <vector>

namespace ddl {

// rgb: h x w x 3, row-major. quality: 1-100.
std::vector<std::uint8_t> encode_jpeg(const std::uint8_t* rgb, int h, int w, int quality);

}  // namespace ddl
