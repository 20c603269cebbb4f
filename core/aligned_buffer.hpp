// A move-only, 64-byte aligned, zero-initialised array: the storage behind tensors and the flat
// parameter, gradient and optimizer-state buffers. 64 bytes is an AVX-512 register and a cache line.
//
// A megabyte or more is mapped from the kernel and unmapped when freed. glibc's malloc keeps freed blocks
// below its mmap threshold in its heap, resident, and raises that threshold up to 32 MB as large blocks
// are freed: a buffer pool's first steps, which allocate and free every request before the pool has
// learned them, left ResNet-50 1.5 GB of such heap beside the arena that served the later steps. A mapping of
// 2 MB or more asks for transparent huge pages (where the kernel gives them only when asked, "madvise", as
// on this project's Debian machines): its first touch then faults once per 2 MB instead of once per 4 kB,
// which took ResNet-50's set-up and warm-up steps from 31 to 14 s on two cores.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>

namespace ddl {

inline constexpr std::size_t kAlignment = 64;
// `bytes` rounded up to a whole number of kAlignment units: what an allocation of `bytes` takes.
inline constexpr std::size_t aligned_size(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
// Built with AddressSanitizer: GCC says so with __SANITIZE_ADDRESS__, clang (before 22) only through
// __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define DDL_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DDL_ADDRESS_SANITIZER 1
#endif
#endif

// Under AddressSanitizer every buffer comes from malloc, whose red zones let it see overruns.
#if defined(DDL_ADDRESS_SANITIZER)
inline constexpr std::size_t kMappedFrom = static_cast<std::size_t>(-1);
#else
inline constexpr std::size_t kMappedFrom = std::size_t{1} << 20;
#endif

// Hands the whole 2 MB blocks inside `values` back to the kernel: the resident memory drops at once, and
// they read as zero when next touched. For a mapped buffer's values that are no longer needed (a sharded
// run's gradients that other ranks own, once reduced). Whole huge pages, so that where transparent huge
// pages are on (the default of many distributions) none is split into small ones.
inline constexpr std::size_t kReleaseBlockBytes = std::size_t{2} << 20;
template <typename T>
void release_pages(std::span<T> values) {
  constexpr std::uintptr_t page = kReleaseBlockBytes;
  const auto first = reinterpret_cast<std::uintptr_t>(values.data());
  const std::uintptr_t begin = (first + page - 1) / page * page, end = (first + values.size_bytes()) / page * page;
  // Advice only: where the kernel declines, the pages stay resident and hold what they held.
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// release_pages of values[begin, end) but for values[keep_begin, keep_end): a rank's shard of a sharded buffer,
// and the blocks it touches, stay.
template <typename T>
void release_pages_outside(std::span<T> values, std::size_t begin, std::size_t end, std::size_t keep_begin,
                           std::size_t keep_end) {
  if (begin < keep_begin) release_pages(values.subspan(begin, std::min(end, keep_begin) - begin));
  if (end > keep_end) {
    const std::size_t from = std::max(begin, keep_end);
    release_pages(values.subspan(from, end - from));
  }
}

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t count) : count_(count) {
    if (count == 0) return;
    const std::size_t bytes = aligned_size(count * sizeof(T));
    if (bytes >= kMappedFrom) {
      // Page-aligned, and zero as mapped.
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      if (bytes >= kReleaseBlockBytes) madvise(p, bytes, MADV_HUGEPAGE);
      data_ = std::unique_ptr<T, Free>(static_cast<T*>(p), Free{Free::mapped, bytes});
      return;
    }
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    data_.reset(static_cast<T*>(p));
  }

  // `count` elements of storage that another owner keeps (a BufferPool's arena): nothing is freed with it.
  static AlignedBuffer view(T* data, std::size_t count) {
    AlignedBuffer b;
    b.data_ = std::unique_ptr<T, Free>(data, Free{Free::borrowed, 0});
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
    enum Kind { heap, mapped, borrowed } kind = heap;
    std::size_t mapped_bytes = 0;
    void operator()(T* p) const {
      if (kind == heap) std::free(p);
      if (kind == mapped) munmap(p, mapped_bytes);
    }
  };
  std::unique_ptr<T, Free> data_;
  std::size_t count_ = 0;
};

}  // namespace ddl
