// The per-process compute context: the one oneDNN CPU engine and stream every layer runs on, a scratch
// block for buffers that live only inside one layer's backward call (a fused ReLU's gradient), and the pool
// that gradients, activations and weight copies are leased from. Passed explicitly; there is no global one.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <memory>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/buffer_pool.hpp"
#include "core/tensor.hpp"

namespace ddl {

class Context {
 public:
  Context() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

  // What convolutions and dense layers compute in: f32, or bf16 (mixed precision: their inputs and weights
  // rounded to bf16 on the way in, products accumulated and written in f32, so every other layer, the
  // gradients and the optimizer stay f32). Set before the layers are set up.
  void set_compute_type(dnnl::memory::data_type type) { compute_type_ = type; }
  dnnl::memory::data_type compute_type() const { return compute_type_; }

  // Layers reserve at set-up what they need; during steps scratch() stays put (it never reallocates then).
  void reserve_scratch(std::size_t bytes) {
    if (bytes > scratch_.size()) scratch_ = AlignedBuffer<std::byte>(bytes);
  }
  void* scratch() { return scratch_.data(); }

  // The pool learns each kind of step's requests (BufferPool::begin_step): the trainer marks its steps.
  void begin_step(int kind) { pool_.begin_step(kind); }
  std::size_t step_arena_bytes(int kind) const { return pool_.arena_bytes(kind); }
  // A tensor whose storage comes from the pool; give_back returns it (and leaves `t` empty).
  Tensor lease(const dnnl::memory::desc& md) { return Tensor(md, engine_, pool_.take(md.get_size())); }
  void give_back(Tensor& t) {
    pool_.give(t.release_storage());
    t = Tensor();
  }

 private:
  BufferPool pool_;
  AlignedBuffer<std::byte> scratch_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::memory::data_type compute_type_ = dnnl::memory::data_type::f32;
};

}  // namespace ddl
