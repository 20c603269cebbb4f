// bfloat16 conversion, for the all-reduce wire format and the element-wise loops over bf16 activations:
// the top 16 bits of an IEEE float, rounded to nearest even (NaN kept a NaN).
#pragma once

#include <cstdint>
#include <cstring>

namespace ddl {

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace ddl
