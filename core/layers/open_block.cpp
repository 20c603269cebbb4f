#include "core/layers/open_block.hpp"

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

Fork::Fork(std::shared_ptr<SideValue> side, Sequential shortcut)
    : side_(std::move(side)), shortcut_(std::move(shortcut)) {
  if (!side_) throw Error("fork: no side value");
}

std::string Fork::describe() const { return identity() ? "fork" : "fork, shortcut " + shortcut_.describe(); }

std::vector<ParamSpec> Fork::param_specs() const {
  std::vector<ParamSpec> all;
  append_prefixed(all, shortcut_.param_specs(), "shortcut");
  return all;
}

void Fork::bind(const std::vector<ParamView>& views, Context& ctx) { shortcut_.bind(views, ctx); }

dnnl::memory::desc Fork::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  for (Tensor* t : {&side_->held, &side_->grad})
    if (!t->empty()) ctx.give_back(*t);
  side_->value = nullptr;
  shortcut_.set_may_overwrite_diff_dst(true);  // the side value's gradient, the Fork's alone by then
  side_->desc = identity() ? src : shortcut_.setup(ctx, src, mode, need_diff_src);
  dims_t per_image = dims_of(side_->desc);
  per_image.erase(per_image.begin());
  if (per_image != side_->dims)
    throw Error("fork: its side value is " + to_string(per_image) + " an image, not the " + to_string(side_->dims) +
                " that a stage receiving it expects");
  to_side_.reset();
  if (!identity()) to_side_.emplace(ctx, side_->desc, side_->desc);
  add_diffs_.reset();
  if (need_diff_src && mode == Mode::train) {
    diff_src_.reset(src);
    add_diffs_ = dnnl::binary(make_binary_pd(ctx.engine(), dnnl::algorithm::binary_add, src, src, src));
  }
  return src;
}

const Tensor& Fork::forward(Context& ctx, const Tensor& src) {
  if (identity()) {
    side_->value = &src;
    return src;
  }
  const Tensor& shortcut = shortcut_.forward(ctx, src);
  // A recomputed segment runs the forward again on a value still held: the same bits into the same tensor.
  if (side_->held.empty()) side_->held = ctx.lease(side_->desc);
  (*to_side_)(ctx, shortcut.memory(), side_->held.memory());
  if (!shortcut_.backward_reads_output()) shortcut_.release_output(ctx);
  side_->value = &side_->held;
  return src;
}

const Tensor& Fork::backward(Context& ctx, const Tensor& diff_dst) {
  if (side_->grad.empty()) throw Error("fork: backward before its join's");
  const Tensor& side_diff = identity() ? side_->grad : shortcut_.backward(ctx, side_->grad);
  if (add_diffs_)
    add_diffs_->execute(ctx.stream(), {{DNNL_ARG_SRC_0, diff_dst.memory()},
                                       {DNNL_ARG_SRC_1, side_diff.memory()},
                                       {DNNL_ARG_DST, diff_src_.get(ctx).memory()}});
  if (!identity()) {
    shortcut_.release_gradient(ctx);
    if (!side_->held.empty()) ctx.give_back(side_->held);
  }
  ctx.give_back(side_->grad);
  side_->value = nullptr;
  return diff_src_.current();
}

std::vector<StateView> Fork::state() {
  std::vector<StateView> all;
  append_prefixed(all, shortcut_.state(), "shortcut");
  return all;
}

Join::Join(std::shared_ptr<SideValue> side, JoinKind kind, bool relu)
    : side_(std::move(side)), kind_(kind), relu_(relu) {
  if (!side_) throw Error("join: no side value");
  if (relu_ && concat()) throw Error("join: a ReLU follows an addition only");
}

std::string Join::describe() const {
  if (!concat()) return relu_ ? "join by addition +relu" : "join by addition";
  return kind_ == JoinKind::concat_side_first ? "join by concatenation, side first" : "join by concatenation";
}

dnnl::memory::desc Join::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  if (dims_of(side_->desc).empty()) throw Error("join: set up before its fork, and not received from a stage");
  const dims_t s = dims_of(src), side = dims_of(side_->desc);
  add_.reset();
  concat_.reset();
  if (!concat()) {
    if (s != side) throw Error("join: its paths give " + to_string(s) + " and " + to_string(side));
    side_to_src_ = Relayout(ctx, side_->desc, src);
    add_ = dnnl::binary(make_binary_pd(ctx.engine(), dnnl::algorithm::binary_add, src, src, src, relu_post_op(relu_)));
    dst_md_ = src;
  } else {
    dims_t d = s, rest = side;
    d[1] = rest[1] = 0;
    if (s.size() < 2 || d != rest) throw Error("join: its paths give " + to_string(s) + " and " + to_string(side));
    d[1] = s[1] + side[1];
    dst_md_ = plain_desc(d);
    const bool side_first = kind_ == JoinKind::concat_side_first;
    dims_t side_at(d.size(), 0), src_at(d.size(), 0);
    if (side_first)
      src_at[1] = side[1];
    else
      side_at[1] = s[1];
    side_slice_md_ = dst_md_.submemory_desc(side, side_at);
    src_slice_md_ = dst_md_.submemory_desc(s, src_at);
    const std::vector<dnnl::memory::desc> parts =
        side_first ? std::vector{side_->desc, src} : std::vector{src, side_->desc};
    concat_ = dnnl::concat(make_concat_pd(ctx.engine(), dst_md_, 1, parts));
  }
  reset_output(ctx, dst_md_);
  if (mode == Mode::infer) return dst_md_;
  relu_backward_ = relu_ ? FusedReluBackward(ctx, dst_md_, FusedReluBackward::Storage::lease) : FusedReluBackward();
  diff_to_side_.emplace(ctx, concat() ? side_slice_md_ : dst_md_, side_->desc);
  diff_to_src_.reset();
  if (need_diff_src) {
    diff_src_.reset(src);
    diff_to_src_.emplace(ctx, concat() ? src_slice_md_ : dst_md_, src);
  }
  return dst_md_;
}

const Tensor& Join::forward(Context& ctx, const Tensor& src) {
  if (!side_->value) throw Error("join: forward without its side value");
  const Tensor& dst = output_.get(ctx);
  if (add_) {
    add_->execute(ctx.stream(), {{DNNL_ARG_SRC_0, src.memory()},
                                 {DNNL_ARG_SRC_1, side_to_src_(ctx, side_->value->memory())},
                                 {DNNL_ARG_DST, dst.memory()}});
  } else {
    const bool side_first = kind_ == JoinKind::concat_side_first;
    concat_->execute(ctx.stream(), {{DNNL_ARG_MULTIPLE_SRC, (side_first ? *side_->value : src).memory()},
                                    {DNNL_ARG_MULTIPLE_SRC + 1, (side_first ? src : *side_->value).memory()},
                                    {DNNL_ARG_DST, dst.memory()}});
  }
  if (!side_->read_again) {  // its last reader
    if (!side_->held.empty()) ctx.give_back(side_->held);
    side_->value = nullptr;
  }
  return dst;
}

const Tensor& Join::backward(Context& ctx, const Tensor& diff_dst) {
  const Tensor& grad = relu_backward_(ctx, output_.current(), diff_dst);
  // The concatenation's parts are sub-tensors of its gradient; the addition's gradient is each path's.
  auto part = [&](const dnnl::memory::desc& slice) {
    return concat() ? dnnl::memory(slice, ctx.engine(), const_cast<float*>(grad.data())) : grad.memory();
  };
  if (!side_->grad.empty()) throw Error("join: backward while the side value's last gradient is still held");
  side_->grad = ctx.lease(side_->desc);
  (*diff_to_side_)(ctx, part(side_slice_md_), side_->grad.memory());
  if (diff_to_src_) (*diff_to_src_)(ctx, part(src_slice_md_), diff_src_.get(ctx).memory());
  relu_backward_.release(ctx);
  return diff_src_.current();
}

}  // namespace ddl
