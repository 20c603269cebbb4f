// Moves data between two layouts of the same logical tensor with a reorder primitive built once at set-up,
// or passes the memory through untouched when the layouts already agree (the common case: oneDNN's
// choices are propagated from layer to layer so that reorders happen only at boundaries).
#pragma once

#include <memory>
#include <optional>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace ddl {

class Relayout {
 public:
  Relayout() = default;
  Relayout(Context& ctx, const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
    if (from != to) {
      buffer_ = std::make_shared<Tensor>(to, ctx.engine());
      reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine(), from, ctx.engine(), to));
    }
  }
  // Returns `from` itself, or the buffer holding it in the target layout.
  const dnnl::memory& operator()(Context& ctx, const dnnl::memory& from) {
    if (!reorder_) return from;
    reorder_->execute(ctx.stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, buffer_->memory()}});
    return buffer_->memory();
  }
  const Tensor& operator()(Context& ctx, const Tensor& from) {
    if (!reorder_) return from;
    reorder_->execute(ctx.stream(), {{DNNL_ARG_FROM, from.memory()}, {DNNL_ARG_TO, buffer_->memory()}});
    return *buffer_;
  }
  // What the last call returned, without reordering again (the source must be unchanged since).
  const dnnl::memory& last(const dnnl::memory& from) const { return reorder_ ? buffer_->memory() : from; }

 private:
  std::optional<dnnl::reorder> reorder_;
  std::shared_ptr<Tensor> buffer_;
};

// A tensor in another layout (or type) that exists only while a layer uses it: the call that converts
// it leases the copy from the context's pool, release() gives it back. Unlike Relayout's buffer, which
// lives as long as the layer, such copies are held only from their use to their release: a convolution's
// weights in its forward's and its backward's layouts (ResNet-50: 83 MB each), a matmul's bf16 operands
// (ViT-B/16's linear layers and attention). A copy held from forward to backward is one per micro-batch in
// flight.
class LeasedCopy {
 public:
  LeasedCopy() = default;
  LeasedCopy(Context& ctx, const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
    if (from != to) {
      md_ = to;
      reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine(), from, ctx.engine(), to));
    }
  }
  // `from` itself, or the copy converted now, held until release().
  const dnnl::memory& operator()(Context& ctx, const dnnl::memory& from) {
    if (!reorder_) return from;
    if (copy_.empty()) copy_ = ctx.lease(md_);
    reorder_->execute(ctx.stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, copy_.memory()}});
    return copy_.memory();
  }
  // What the last call returned, without converting again (the source must be unchanged since).
  const dnnl::memory& last(const dnnl::memory& from) const { return reorder_ ? copy_.memory() : from; }
  void release(Context& ctx) {
    if (!copy_.empty()) ctx.give_back(copy_);
  }

 private:
  dnnl::memory::desc md_;
  std::optional<dnnl::reorder> reorder_;
  Tensor copy_;
};

// Copies `from` into `to` (different layouts allowed), or adds it, with a reorder built once.
class Copy {
 public:
  enum class Mode { replace, add };  // add: to += from
  Copy() = default;
  Copy(Context& ctx, const dnnl::memory::desc& from, const dnnl::memory::desc& to, Mode mode = Mode::replace)
      : reorder_(dnnl::reorder::primitive_desc(ctx.engine(), from, ctx.engine(), to, attributes(mode))) {}
  void operator()(Context& ctx, const dnnl::memory& from, const dnnl::memory& to) {
    reorder_.execute(ctx.stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  }

 private:
  static dnnl::primitive_attr attributes(Mode mode) {
    dnnl::primitive_attr attr;
    if (mode == Mode::add) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    return attr;
  }
  dnnl::reorder reorder_;
};

}  // namespace ddl
