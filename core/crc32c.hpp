// CRC-32C (Castagnoli), as TFRecord files frame their records (TensorBoard's event files): the reflected
// polynomial 0x82F63B78, initial value and final XOR all ones. Byte-wise from a table: the event files it
// checks are a few kilobytes an epoch.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ddl {

inline std::uint32_t crc32c(std::string_view bytes) {
  static constexpr std::array<std::uint32_t, 256> kTable = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t crc = 0xFFFFFFFFu;
  for (const char b : bytes) crc = kTable[(crc ^ static_cast<std::uint8_t>(b)) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

// TFRecord's masked CRC: rotated and offset, so that a CRC of bytes that hold CRCs is not degenerate.
inline std::uint32_t masked_crc32c(std::string_view bytes) {
  const std::uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

}  // namespace ddl
