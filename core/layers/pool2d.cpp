#include "core/layers/pool2d.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

using memory = dnnl::memory;

namespace {
bool global(PoolKind kind) { return kind == PoolKind::global_avg || kind == PoolKind::global_max; }
}  // namespace

Pool2d::Pool2d(const Pool2dOptions& options) : opt_(options) {
  if (!global(opt_.kind) && (opt_.kernel <= 0 || opt_.stride <= 0 || opt_.padding < 0))
    throw InputError("pool2d: kernel and stride must be positive and padding non-negative");
  if (!global(opt_.kind) && 2 * opt_.padding > opt_.kernel)
    throw InputError("pool2d: padding must be at most half the kernel");
}

std::string Pool2d::describe() const {
  if (global(opt_.kind)) return opt_.kind == PoolKind::global_avg ? "global_avg_pool" : "global_max_pool";
  std::string name = opt_.kind == PoolKind::max ? "max_pool" : "avg_pool";
  return name + " k" + std::to_string(opt_.kernel) + " s" + std::to_string(opt_.stride) + " p" +
         std::to_string(opt_.padding) + (opt_.ceil_mode ? " ceil" : "");
}

memory::desc Pool2d::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src_md);
  if (in.size() != 4) throw InputError(describe() + ": expects input [N, C, H, W], got " + to_string(in));
  dims_t kernel = {opt_.kernel, opt_.kernel}, strides = {opt_.stride, opt_.stride};
  dims_t padding = {opt_.padding, opt_.padding};
  if (global(opt_.kind)) {
    kernel = {in[2], in[3]};
    strides = {1, 1};
    padding = {0, 0};
  }
  if (in[2] + 2 * padding[0] < kernel[0] || in[3] + 2 * padding[1] < kernel[1])
    throw InputError(describe() + ": input " + to_string(in) + " is smaller than the kernel");
  dims_t dst_dims = {in[0], in[1], 0, 0}, padding_r = padding;
  for (int a = 0; a < 2; ++a) {
    const memory::dim size = in[2 + a], p = padding[a], k = kernel[a], s = strides[a];
    memory::dim out = (size + 2 * p - k + (opt_.ceil_mode ? s - 1 : 0)) / s + 1;
    if (opt_.ceil_mode && (out - 1) * s >= size + p) --out;
    dst_dims[2 + a] = out;
    padding_r[a] = std::max(p, (out - 1) * s + k - size - p);
    if (padding_r[a] > p && opt_.kind == PoolKind::avg_include_padding)
      throw InputError(describe() + ": ceil_mode's last window on input " + to_string(in) +
                       " reaches past the padding, which an average that counts padding does not count");
  }
  auto alg = opt_.kind == PoolKind::max || opt_.kind == PoolKind::global_max ? dnnl::algorithm::pooling_max
             : opt_.kind == PoolKind::avg_include_padding ? dnnl::algorithm::pooling_avg_include_padding
                                                          : dnnl::algorithm::pooling_avg_exclude_padding;
  auto prop = mode == Mode::train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  // The output keeps the input's layout and type: pooling is memory-bound and has no layout preference of
  // its own, and oneDNN pools bf16 into bf16 only.
  memory::desc dst_any(dst_dims, data_type_of(src_md), tag::any);
  const auto fwd_pd =
      make_pooling_forward_pd(ctx.engine(), prop, alg, src_md, dst_any, strides, kernel, padding, padding_r);
  fwd_ = dnnl::pooling_forward(fwd_pd);
  reset_output(ctx, fwd_pd.dst_desc());
  workspace_ = fwd_pd.workspace_desc().get_size() ? Tensor(fwd_pd.workspace_desc(), ctx.engine()) : Tensor();

  bwd_.reset();
  previous_relu_backward_ = FusedReluBackward();
  if (mode == Mode::train && need_diff_src) {
    const auto bwd_pd = make_pooling_backward_pd(ctx.engine(), alg, src_md, fwd_pd.dst_desc(), strides, kernel,
                                                 padding, padding_r, fwd_pd);
    if (bwd_pd.diff_src_desc() != src_md || bwd_pd.diff_dst_desc() != fwd_pd.dst_desc())
      throw Error(describe() + ": oneDNN chose unexpected backward layouts");
    bwd_ = dnnl::pooling_backward(bwd_pd);
    if (relu_backward_of_previous_)
      previous_relu_backward_ = FusedReluBackward(ctx, fwd_pd.dst_desc(), may_overwrite_diff_dst_);
    diff_src_.reset(src_md);
  }
  return output_.desc();
}

const Tensor& Pool2d::forward(Context& ctx, const Tensor& src) {
  const Tensor& dst = output_.get(ctx);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src.memory()}, {DNNL_ARG_DST, dst.memory()}};
  if (!workspace_.empty()) args.insert({DNNL_ARG_WORKSPACE, workspace_.memory()});
  fwd_.execute(ctx.stream(), args);
  return dst;
}

const Tensor& Pool2d::backward(Context& ctx, const Tensor& diff_dst) {
  if (!bwd_) return diff_src_.current();
  const memory& gradient = previous_relu_backward_(ctx, output_.current().memory(), diff_dst.memory());
  std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, gradient}, {DNNL_ARG_DIFF_SRC, diff_src_.get(ctx).memory()}};
  if (!workspace_.empty()) args.insert({DNNL_ARG_WORKSPACE, workspace_.memory()});
  bwd_->execute(ctx.stream(), args);
  return diff_src_.current();
}

}  // namespace ddl
