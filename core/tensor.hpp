// A tensor: a oneDNN memory descriptor (shape, data type, layout) over 64-byte aligned storage it owns.
// The layout may be one oneDNN chose (blocked, e.g. nChw16c); `dims()` is always the logical shape.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "core/aligned_buffer.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

using dims_t = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

enum class DataType { f32, bf16 };

class Tensor {
 public:
  Tensor() = default;
  Tensor(const dnnl::memory::desc& md, const dnnl::engine& engine);
  // Over storage handed in (at least md.get_size() bytes), e.g. from a BufferPool.
  Tensor(const dnnl::memory::desc& md, const dnnl::engine& engine, AlignedBuffer<std::byte> storage);
  AlignedBuffer<std::byte> release_storage() { return std::move(storage_); }

  const dnnl::memory::desc& desc() const { return md_; }
  const dnnl::memory& memory() const { return memory_; }
  dims_t dims() const { return dims_of(md_); }
  DataType data_type() const;
  bool empty() const { return storage_.size() == 0; }
  // Bytes of storage, padding of blocked layouts included.
  std::size_t bytes() const { return md_.get_size(); }
  // Logical element count (product of dims).
  std::size_t elements() const;

  float* data() { return reinterpret_cast<float*>(storage_.data()); }
  const float* data() const { return reinterpret_cast<const float*>(storage_.data()); }

 private:
  dnnl::memory::desc md_;
  AlignedBuffer<std::byte> storage_;
  dnnl::memory memory_;
};

std::size_t product(const dims_t& dims);

// An f32 tensor's values as one array, for what works on flat buffers (collectives, messages).
inline std::span<float> floats(Tensor& t) { return {t.data(), t.elements()}; }
inline std::span<const float> floats(const Tensor& t) { return {t.data(), t.elements()}; }
std::string to_string(const dims_t& dims);

// A plain row-major descriptor (nc, nchw, ...) for the given dims.
dnnl::memory::desc plain_desc(const dims_t& dims, dt type = dt::f32);

// oneDNN's channel-blocked layout (nChw16c, nChw8c, and their 3-d and 5-d forms) for dims, by `block` (16
// or 8) channels; nullopt for another rank.
std::optional<dnnl::memory::desc> channel_blocked_desc(const dims_t& dims, dt type, int block);
// The channels that a channel-blocked descriptor groups (16 or 8), or 0 for any other layout.
int channel_block(const dnnl::memory::desc& md);

}  // namespace ddl
