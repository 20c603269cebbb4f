// A dense layer's weights, kept plain [O, I] in f32, copied into the layout (and type) its inner product
// chose, made by the forward and held until the backward has read it, in storage leased from the context's
// pool (as LeasedCopy's): a large layer's bf16 copy (VGG16's first dense layer: 206 MB) is then not kept
// through the rest of the step, where the peak is.
//
// The common blocked choices, AB16b64a in f32 and AB8b64a2b in bf16 (blocks of 16 inputs by 64 outputs; in
// bf16 the inputs in pairs), are a transpose of 4-byte units: one f32, or two neighbouring bf16. So they
// are copied as oneDNN's reorder of the same bytes seen as 32-bit integers between two views, bf16 after a
// plain conversion: seed_cnn's 4096->64 weights took 0.149 -> 0.064 ms a step in bf16, 0.132 -> 0.111 ms
// in f32, against oneDNN's direct reorder.
#pragma once

#include <optional>

#include "core/context.hpp"
#include "core/layers/relayout.hpp"
#include "core/tensor.hpp"

namespace ddl {

class WeightRelayout {
 public:
  WeightRelayout() = default;
  // `from`: the plain f32 [O, I] weights; `to`: the layout (and type) wanted.
  WeightRelayout(Context& ctx, const dnnl::memory::desc& from, const dnnl::memory::desc& to);

  // `from` itself, or the copy in the wanted layout made now, held until release().
  const dnnl::memory& operator()(Context& ctx, const dnnl::memory& from);
  // What the last call returned, without copying again (the weights must be unchanged since).
  const dnnl::memory& last(const dnnl::memory& from) const { return units_ ? copy_.memory() : other_.last(from); }
  void release(Context& ctx);

 private:
  struct Units {
    dnnl::memory::desc to;                 // the copy's layout
    dnnl::memory::desc plain, transposed;  // [O / a, I / 16, units of 16 inputs, a] over the plain and the copy
    dnnl::reorder transpose;
    std::optional<dnnl::reorder> to_bf16;  // bf16: f32 -> plain bf16 first
  };
  LeasedCopy other_;  // every other layout
  std::optional<Units> units_;
  Tensor copy_;
};

}  // namespace ddl
