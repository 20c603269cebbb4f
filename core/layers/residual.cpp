#include "core/layers/residual.hpp"

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

namespace {
bool has_padding(const dnnl::memory::desc& md) {
  return md.get_size() != product(dims_of(md)) * dnnl::memory::data_type_size(data_type_of(md));
}
}  // namespace

Residual::Residual(std::string name, Sequential body, Sequential shortcut, bool relu)
    : name_(std::move(name)), body_(std::move(body)), shortcut_(std::move(shortcut)), relu_(relu) {
  if (body_.empty()) throw Error("residual " + name_ + ": empty body");
}

std::vector<ParamSpec> Residual::param_specs() const {
  std::vector<ParamSpec> all;
  append_prefixed(all, body_.param_specs(), "body");
  append_prefixed(all, shortcut_.param_specs(), "shortcut");
  return all;
}

void Residual::bind(const std::vector<ParamView>& views, Context& ctx) {
  bind_in_order({&body_, &shortcut_}, views, ctx);
}

dnnl::memory::desc Residual::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  set_output_type(ctx, output_type_);  // when no enclosing model or block did
  // Both paths read the block's gradient: neither may overwrite it.
  body_.set_may_overwrite_diff_dst(false);
  shortcut_.set_may_overwrite_diff_dst(false);
  const dnnl::memory::desc body_md = body_.setup(ctx, src, mode, need_diff_src);
  const dnnl::memory::desc short_md = identity() ? src : shortcut_.setup(ctx, src, mode, need_diff_src);
  if (dims_of(body_md) != dims_of(short_md))
    throw Error(name_ + ": body gives " + to_string(dims_of(body_md)) + " but the shortcut " +
                to_string(dims_of(short_md)));
  shortcut_to_dst_ = Relayout(ctx, short_md, body_md);
  add_ = dnnl::binary(
      make_binary_pd(ctx.engine(), dnnl::algorithm::binary_add, body_md, body_md, body_md, relu_post_op(relu_)));
  // Where the body's backward does not read its output (a BatchNorm last, as in ResNet), the sum
  // overwrites it, as PyTorch's `out += identity` does: one tensor fewer kept per block. Not with the
  // ReLU on a layout padded past the channels (4 channels in blocks of 16): there oneDNN 2.7's in-place
  // addition with a ReLU gives wrong sums.
  sum_in_place_ = !body_.backward_reads_output() && !(relu_ && has_padding(body_md));
  reset_output(ctx, sum_in_place_ ? dnnl::memory::desc() : body_md);
  if (mode == Mode::infer) return body_md;

  using Storage = FusedReluBackward::Storage;
  relu_backward_ =
      relu_ ? FusedReluBackward(ctx, body_md, may_overwrite_diff_dst_ ? Storage::in_place : Storage::lease)
            : FusedReluBackward();
  diff_to_shortcut_ = Relayout(ctx, body_md, short_md);
  add_diffs_.reset();
  if (need_diff_src) {
    add_diffs_ = dnnl::binary(make_binary_pd(ctx.engine(), dnnl::algorithm::binary_add, src, src, src));
    diff_src_.reset(src);
  }
  return body_md;
}

const Tensor& Residual::forward(Context& ctx, const Tensor& src) {
  const Tensor& body = body_.forward(ctx, src);
  const Tensor& shortcut = shortcut_to_dst_(ctx, identity() ? src : shortcut_.forward(ctx, src));
  dst_ = sum_in_place_ ? &body : &output_.get(ctx);
  add_.execute(ctx.stream(),
               {{DNNL_ARG_SRC_0, body.memory()}, {DNNL_ARG_SRC_1, shortcut.memory()}, {DNNL_ARG_DST, dst_->memory()}});
  // The addition was the shortcut output's last reader where the shortcut's backward does not read it.
  if (!identity() && !shortcut_.backward_reads_output()) shortcut_.release_output(ctx);
  return *dst_;
}

const Tensor& Residual::backward(Context& ctx, const Tensor& diff_dst) {
  const Tensor& grad = relu_backward_(ctx, *dst_, diff_dst);
  const Tensor& grad_for_shortcut = diff_to_shortcut_(ctx, grad);
  const Tensor& diff_body = body_.backward(ctx, grad);
  const Tensor& diff_shortcut = identity() ? grad_for_shortcut : shortcut_.backward(ctx, grad_for_shortcut);
  if (add_diffs_)
    add_diffs_->execute(ctx.stream(), {{DNNL_ARG_SRC_0, diff_body.memory()},
                                       {DNNL_ARG_SRC_1, diff_shortcut.memory()},
                                       {DNNL_ARG_DST, diff_src_.get(ctx).memory()}});
  body_.release_gradient(ctx);
  if (!identity()) shortcut_.release_gradient(ctx);
  relu_backward_.release(ctx);
  return diff_src_.current();
}

std::vector<StateView> Residual::state() {
  std::vector<StateView> all;
  append_prefixed(all, body_.state(), "body");
  append_prefixed(all, shortcut_.state(), "shortcut");
  return all;
}

}  // namespace ddl
