// Moves data between two layouts of the same logical tensor with a reorder primitive built once at set-up,
// or passes the memory through untouched when the layouts already agree (the common case: oneDNN's
// choices are propagated from layer to layer so that reorders happen only at boundaries).
#pragma once

#include <optional>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace ddl {

class Relayout {
 public:
  Relayout() = default;
  Relayout(Context& ctx, const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
    if (from != to) {
      buffer_ = Tensor(to, ctx.engine());
      reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine(), from, ctx.engine(), to));
    }
  }

  // Returns `from` itself, or the buffer holding it in the target layout.
  const dnnl::memory& operator()(Context& ctx, const dnnl::memory& from) {
    if (!reorder_) return from;
    reorder_->execute(ctx.stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, buffer_.memory()}});
    return buffer_.memory();
  }
  const Tensor& operator()(Context& ctx, const Tensor& from) {
    if (!reorder_) return from;
    reorder_->execute(ctx.stream(), {{DNNL_ARG_FROM, from.memory()}, {DNNL_ARG_TO, buffer_.memory()}});
    return buffer_;
  }
  // What the last call returned, without reordering again (the source must be unchanged since).
  const dnnl::memory& last(const dnnl::memory& from) const { return reorder_ ? buffer_.memory() : from; }

 private:
  std::optional<dnnl::reorder> reorder_;
  Tensor buffer_;
};

// Copies `from` into `to` (different layouts allowed) with a reorder built once.
class Copy {
 public:
  Copy() = default;
  Copy(Context& ctx, const dnnl::memory::desc& from, const dnnl::memory::desc& to)
      : reorder_(dnnl::reorder::primitive_desc(ctx.engine(), from, ctx.engine(), to)) {}
  void operator()(Context& ctx, const dnnl::memory& from, const dnnl::memory& to) {
    reorder_.execute(ctx.stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  }

 private:
  dnnl::reorder reorder_;
};

}  // namespace ddl
