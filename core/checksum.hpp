// A 64-bit checksum of bytes, for telling whether two copies of data are the same (replicas' parameters,
// a checkpoint's header) and for fingerprints of text. Not cryptographic. FNV-1a's step applied to
// whole 64-bit words: each step is a bijection of the running value, so any single changed word (a
// flipped bit) changes the result, and it runs at several GB/s, which byte-wise FNV-1a does not.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace ddl {

class Checksum {
 public:
  Checksum& add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      std::uint64_t word;
      std::memcpy(&word, p + i, 8);
      mix(word);
    }
    std::uint64_t tail = 0;
    if (bytes > i) std::memcpy(&tail, p + i, bytes - i);
    mix(tail ^ (static_cast<std::uint64_t>(bytes) << 56));  // the length too: "ab" + "" differs from "a" + "b"
    return *this;
  }
  template <typename T>
  Checksum& add(std::span<const T> values) {
    return add(values.data(), values.size_bytes());
  }
  Checksum& add(std::string_view text) { return add(text.data(), text.size()); }
  Checksum& add(std::uint64_t value) { return add(&value, sizeof value); }
  std::uint64_t value() const { return h_; }

 private:
  void mix(std::uint64_t word) { h_ = (h_ ^ word) * 0x100000001b3ULL; }
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

}  // namespace ddl
