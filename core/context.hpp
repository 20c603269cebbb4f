// The per-process compute context: the one oneDNN CPU engine and stream every layer runs on, and a
// scratch block for buffers that live only inside one layer's backward call (a fused ReLU's gradient),
// shared by all layers instead of one such buffer each. Passed explicitly; there is no global instance.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>

#include "core/aligned_buffer.hpp"

namespace ddl {

class Context {
 public:
  Context() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

  // Layers reserve at set-up what they need; during steps scratch() stays put (it never reallocates then).
  void reserve_scratch(std::size_t bytes) {
    if (bytes > scratch_.size()) scratch_ = AlignedBuffer<std::byte>(bytes);
  }
  void* scratch() { return scratch_.data(); }

 private:
  AlignedBuffer<std::byte> scratch_;
  dnnl::engine engine_;
  dnnl::stream stream_;
};

}  // namespace ddl
