#include "core/layers/concat.hpp"

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {
namespace {

// The concatenation's layout. DenseNet's concatenations feed a batch normalisation and a 1x1 convolution:
// in the plain layout oneDNN normalises with its slow plain-layout kernel and reorders for the
// convolution, which then dominates the step. Where a branch's output came in oneDNN's channel-blocked
// layout (nChw16c, or nChw8c on AVX2) and every part's channels fill whole blocks, the concatenation keeps
// that layout: its parts still start at block boundaries, so each branch's slice of the gradient is a
// sub-tensor of it. Else plain.
dnnl::memory::desc concat_layout(const dims_t& dims, const std::vector<dnnl::memory::desc>& parts) {
  for (const int block : {16, 8}) {
    bool whole_blocks = true, one_blocked = false;
    for (const auto& part : parts) {
      whole_blocks &= dims_of(part)[1] % block == 0;
      one_blocked |= channel_block(part) == block;
    }
    if (whole_blocks && one_blocked) return *channel_blocked_desc(dims, dt::f32, block);
  }
  return plain_desc(dims);
}

}  // namespace

Concat::Concat(std::string name, std::vector<Sequential> branches)
    : name_(std::move(name)), branches_(std::move(branches)) {
  if (branches_.size() < 2) throw Error("concat " + name_ + ": needs at least two branches");
}

std::vector<ParamSpec> Concat::param_specs() const {
  std::vector<ParamSpec> all;
  for (std::size_t b = 0; b < branches_.size(); ++b) append_prefixed(all, branches_[b].param_specs(), std::to_string(b));
  return all;
}

void Concat::bind(const std::vector<ParamView>& views, Context& ctx) {
  std::vector<Layer*> parts;
  for (auto& branch : branches_) parts.push_back(&branch);
  bind_in_order(parts, views, ctx);
}

dnnl::memory::desc Concat::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  std::vector<dnnl::memory::desc> outs;
  for (auto& branch : branches_) outs.push_back(branch.empty() ? src : branch.setup(ctx, src, mode, need_diff_src));
  dims_t dst_dims = dims_of(outs[0]);
  dst_dims[1] = 0;
  for (const auto& md : outs) {
    dims_t d = dims_of(md);
    d[1] = 0;
    if (d != dst_dims || dims_of(md)[1] <= 0)
      throw InputError(name_ + ": branch outputs differ beyond axis 1: " + to_string(dims_of(outs[0])) + " vs " +
                  to_string(dims_of(md)));
  }
  for (const auto& md : outs) dst_dims[1] += dims_of(md)[1];
  const dnnl::memory::desc dst_md = concat_layout(dst_dims, outs);
  concat_ = dnnl::concat(make_concat_pd(ctx.engine(), dst_md, 1, outs));
  dst_ = Tensor(dst_md, ctx.engine());
  if (mode == Mode::infer) return dst_md;

  slice_mds_.clear();
  slice_to_branch_.clear();
  branch_grads_.clear();
  dims_t offsets(dst_dims.size(), 0);
  for (const auto& md : outs) {
    slice_mds_.push_back(dst_md.submemory_desc(dims_of(md), offsets));
    slice_to_branch_.emplace_back(ctx, slice_mds_.back(), md);
    branch_grads_.emplace_back(md, ctx.engine());
    offsets[1] += dims_of(md)[1];
  }
  sum_diffs_.reset();
  if (need_diff_src) {
    sum_diffs_ = dnnl::sum(make_sum_pd(ctx.engine(), src, std::vector<float>(branches_.size(), 1.0f),
                                       std::vector<dnnl::memory::desc>(branches_.size(), src)));
    diff_src_.reset(src);
  }
  return dst_md;
}

const Tensor& Concat::forward(Context& ctx, const Tensor& src) {
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DST, dst_.memory()}};
  for (std::size_t b = 0; b < branches_.size(); ++b)
    args.insert({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(b),
                 branches_[b].empty() ? src.memory() : branches_[b].forward(ctx, src).memory()});
  concat_.execute(ctx.stream(), args);
  return dst_;
}

const Tensor& Concat::backward(Context& ctx, const Tensor& diff_dst) {
  std::unordered_map<int, dnnl::memory> args;
  for (std::size_t b = 0; b < branches_.size(); ++b) {
    const dnnl::memory slice(slice_mds_[b], ctx.engine(), const_cast<float*>(diff_dst.data()));
    slice_to_branch_[b](ctx, slice, branch_grads_[b].memory());
    const Tensor& diff = branches_[b].empty() ? branch_grads_[b] : branches_[b].backward(ctx, branch_grads_[b]);
    args.insert({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(b), diff.memory()});
  }
  if (sum_diffs_) {
    args.insert({DNNL_ARG_DST, diff_src_.get(ctx).memory()});
    sum_diffs_->execute(ctx.stream(), args);
  }
  for (auto& branch : branches_) branch.release_gradient(ctx);
  return diff_src_.current();
}

std::vector<StateView> Concat::state() {
  std::vector<StateView> all;
  for (std::size_t b = 0; b < branches_.size(); ++b) append_prefixed(all, branches_[b].state(), std::to_string(b));
  return all;
}

}  // namespace ddl
