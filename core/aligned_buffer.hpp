// A move-only, 64-byte aligned, zero-initialised array: the storage behind tensors and the flat
// parameter, gradient and optimizer-state buffers. 64 bytes is an AVX-512 register and a cache line.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>

namespace ddl {

inline constexpr std::size_t kAlignment = 64;

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t count) : count_(count) {
    if (count == 0) return;
    std::size_t bytes = (count * sizeof(T) + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    data_.reset(static_cast<T*>(p));
  }

  // `count` elements of storage that another owner keeps (a BufferPool's arena): nothing is freed with it.
  static AlignedBuffer view(T* data, std::size_t count) {
    AlignedBuffer b;
    b.data_ = std::unique_ptr<T, Free>(data, Free{false});
    b.count_ = count;
    return b;
  }

  // A moved-from buffer is empty (size 0), not a size without storage.
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::move(other.data_)), count_(std::exchange(other.count_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    data_ = std::move(other.data_);
    count_ = std::exchange(other.count_, 0);
    return *this;
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return count_; }
  T& operator[](std::size_t i) { return data_.get()[i]; }
  const T& operator[](std::size_t i) const { return data_.get()[i]; }
  std::span<T> span() { return {data_.get(), count_}; }
  std::span<const T> span() const { return {data_.get(), count_}; }

 private:
  struct Free {
    bool owns = true;
    void operator()(T* p) const {
      if (owns) std::free(p);
    }
  };
  std::unique_ptr<T, Free> data_;
  std::size_t count_ = 0;
};

}  // namespace ddl
