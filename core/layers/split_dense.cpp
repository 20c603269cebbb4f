#include "core/layers/split_dense.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace ddl {
namespace {

DenseOptions share_of(DenseOptions whole, int parts) {
  if (parts < 1 || whole.out_features % parts != 0)
    throw InputError("dense " + std::to_string(whole.in_features) + "->" + std::to_string(whole.out_features) +
                     ": " + std::to_string(parts) + " ranks do not split its " + std::to_string(whole.out_features) +
                     " output features evenly");
  whole.out_features /= parts;
  return whole;
}

}  // namespace

SplitDense::SplitDense(const DenseOptions& whole, TensorGroup& group, bool gathers_batch)
    : whole_(whole), group_(group), gathers_batch_(gathers_batch), part_(share_of(whole, group.size())) {}

std::string SplitDense::describe() const {
  return "dense " + std::to_string(whole_.in_features) + "->" + std::to_string(whole_.out_features) +
         (whole_.relu ? " +relu" : "") + " split " + std::to_string(group_.size()) +
         (gathers_batch_ ? ", batch gathered" : "");
}

std::vector<ParamSpec> SplitDense::param_specs() const {
  std::vector<ParamSpec> specs = part_.param_specs();
  for (auto& spec : specs) {
    spec.whole_dims = spec.dims;
    spec.whole_dims[0] *= group_.size();
    spec.row_begin = spec.dims[0] * group_.rank();
  }
  specs[0].fan_out = static_cast<std::size_t>(whole_.out_features);  // the whole layer's, as it initialises
  return specs;
}

dnnl::memory::desc SplitDense::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src);
  if (in.size() != 2 || src != plain_desc(in)) throw Error(describe() + ": expects a plain [N, I] input");
  gather_now_ = gathers_batch_ && mode == Mode::train;
  const auto T = static_cast<dnnl::memory::dim>(group_.size());
  const dnnl::memory::dim rows = gather_now_ ? in[0] * T : in[0];
  dnnl::memory::desc part_src = src;
  if (gather_now_) {
    group_src_ = Tensor(plain_desc({rows, in[1]}), ctx.engine());
    part_src = group_src_.desc();
  }
  need_diff_src_ = need_diff_src;
  const dnnl::memory::desc part_dst = part_.setup(ctx, part_src, mode, need_diff_src);
  pieces_ = Tensor(plain_desc({T, rows, whole_.out_features / T}), ctx.engine());
  dst_ = Tensor(plain_desc({rows, whole_.out_features}), ctx.engine());
  if (mode == Mode::train) diff_part_ = Tensor(part_dst, ctx.engine());
  diff_src_.reset(need_diff_src ? src : dnnl::memory::desc());
  return dst_.desc();
}

const Tensor& SplitDense::forward(Context& ctx, const Tensor& src) {
  if (gather_now_) group_.all_gather(floats(src), floats(group_src_));
  const Tensor& part = part_.forward(ctx, gather_now_ ? group_src_ : src);
  group_.all_gather(floats(part), floats(pieces_));
  // Rank after rank, [T][rows][share] becomes each row's features in order, [rows][T * share].
  const dims_t d = pieces_.dims();
  const auto share = static_cast<std::size_t>(d[2]);
  for (dnnl::memory::dim t = 0; t < d[0]; ++t)
    for (dnnl::memory::dim r = 0; r < d[1]; ++r)
      std::memcpy(dst_.data() + (r * d[0] + t) * d[2], pieces_.data() + (t * d[1] + r) * d[2], share * sizeof(float));
  return dst_;
}

const Tensor& SplitDense::backward(Context& ctx, const Tensor& diff_dst) {
  // Every rank holds the same whole output gradient: its share needs no communication.
  const dims_t d = pieces_.dims();
  const auto share = static_cast<std::size_t>(d[2]);
  const dnnl::memory::dim t = group_.rank();
  for (dnnl::memory::dim r = 0; r < d[1]; ++r)
    std::memcpy(diff_part_.data() + r * d[2], diff_dst.data() + (r * d[0] + t) * d[2], share * sizeof(float));
  const Tensor& partial = part_.backward(ctx, diff_part_);
  if (need_diff_src_) {
    Tensor& out = diff_src_.get(ctx);
    if (gather_now_) {
      group_.reduce_scatter_sum(floats(partial), floats(out));
      const auto scale = static_cast<float>(group_.size());
      for (float& v : floats(out)) v *= scale;
    } else {
      std::memcpy(out.data(), partial.data(), partial.bytes());
      group_.all_reduce_sum(floats(out));
    }
  }
  part_.release_gradient(ctx);
  return diff_src_.current();
}

void SplitDense::release_gradient(Context& ctx) { diff_src_.give_back(ctx); }

}  // namespace ddl
