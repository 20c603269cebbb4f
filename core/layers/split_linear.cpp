#include "core/layers/split_linear.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/layers/attention.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/elementwise.hpp"

namespace ddl {
namespace {

int share(int features, int parts, const std::string& what) {
  if (parts < 1 || features % parts != 0)
    throw InputError(what + ": " + std::to_string(parts) + " ranks do not split its " + std::to_string(features) +
                     " features evenly");
  return features / parts;
}

std::string linear_name(const LinearOptions& o) {
  return "linear " + std::to_string(o.in_features) + "->" + std::to_string(o.out_features);
}

// Of each of `groups` groups of output features, a share.
LinearOptions column_share(LinearOptions whole, int parts, int groups) {
  const std::string what = groups > 1 ? linear_name(whole) + " (" + std::to_string(groups) + " groups)" : linear_name(whole);
  whole.out_features = share(whole.out_features / groups, parts, what) * groups;
  return whole;
}

LinearOptions row_share(LinearOptions whole, int parts) {
  whole.in_features = share(whole.in_features, parts, linear_name(whole));
  whole.bias = false;
  return whole;
}

}  // namespace

ColumnSplitLinear::ColumnSplitLinear(const LinearOptions& whole, TensorGroup& group, int row_groups)
    : whole_(whole), group_(group), row_groups_(row_groups), part_(column_share(whole, group.size(), row_groups)) {}

std::string ColumnSplitLinear::describe() const {
  return linear_name(whole_) + " split " + std::to_string(group_.size()) + " by columns";
}

std::vector<ParamSpec> ColumnSplitLinear::param_specs() const {
  std::vector<ParamSpec> specs = part_.param_specs();
  const dnnl::memory::dim per_group = part_.options().out_features / row_groups_;
  for (auto& spec : specs) {
    spec.whole_dims = spec.dims;
    spec.whole_dims[0] = whole_.out_features;
    spec.row_groups = row_groups_;
    spec.row_begin = per_group * group_.rank();
  }
  specs[0].fan_out = static_cast<std::size_t>(whole_.out_features);  // initialised as the whole layer
  return specs;
}

dnnl::memory::desc ColumnSplitLinear::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode,
                                            bool need_diff_src) {
  need_diff_src_ = need_diff_src;
  diff_src_.reset(need_diff_src ? src : dnnl::memory::desc());
  return part_.setup(ctx, src, mode, need_diff_src);
}

const Tensor& ColumnSplitLinear::backward(Context& ctx, const Tensor& diff_dst) {
  const Tensor& partial = part_.backward(ctx, diff_dst);
  if (need_diff_src_) {
    Tensor& whole = diff_src_.get(ctx);
    if (whole.bytes() != partial.bytes()) throw Error(describe() + ": the input gradient is not in the input's layout");
    std::memcpy(whole.data(), partial.data(), partial.bytes());
    group_.all_reduce_sum(floats(whole));
  }
  part_.release_gradient(ctx);
  return diff_src_.current();
}

RowSplitLinear::RowSplitLinear(const LinearOptions& whole, TensorGroup& group)
    : whole_(whole), group_(group), part_(row_share(whole, group.size())) {}

std::string RowSplitLinear::describe() const {
  return linear_name(whole_) + " split " + std::to_string(group_.size()) + " by rows";
}

std::vector<ParamSpec> RowSplitLinear::param_specs() const {
  std::vector<ParamSpec> specs = part_.param_specs();
  ParamSpec& weight = specs[0];
  weight.whole_dims = {whole_.out_features, whole_.in_features};
  weight.col_begin = weight.dims[1] * group_.rank();
  weight.fan_in = static_cast<std::size_t>(whole_.in_features);
  if (whole_.bias) specs.push_back({"bias", {whole_.out_features}, Init::zeros});
  return specs;
}

void RowSplitLinear::bind(const std::vector<ParamView>& views, Context& ctx) {
  part_.bind({views[0]}, ctx);
  if (whole_.bias) bias_ = views[1];
}

dnnl::memory::desc RowSplitLinear::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  const dnnl::memory::desc out = part_.setup(ctx, src, mode, need_diff_src);
  if (out != plain_desc(dims_of(out))) throw Error(describe() + ": expects a plain output");
  dst_ = Tensor(out, ctx.engine());
  return out;
}

const Tensor& RowSplitLinear::forward(Context& ctx, const Tensor& src) {
  const Tensor& partial = part_.forward(ctx, src);
  std::memcpy(dst_.data(), partial.data(), partial.bytes());
  group_.all_reduce_sum(floats(dst_));
  if (whole_.bias) {
    const std::size_t out = bias_.value.size(), rows = dst_.elements() / out;
    float* y = dst_.data();
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < out; ++o) y[r * out + o] += bias_.value[o];
  }
  return dst_;
}

const Tensor& RowSplitLinear::backward(Context& ctx, const Tensor& diff_dst) {
  if (whole_.bias) {  // the model keeps what micro-batches accumulated (accumulate_gradients is false)
    const std::size_t out = bias_.grad.size(), rows = diff_dst.elements() / out;
    const float* dy = diff_dst.data();
    std::fill(bias_.grad.begin(), bias_.grad.end(), 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < out; ++o) bias_.grad[o] += dy[r * out + o];
  }
  return part_.backward(ctx, diff_dst);
}

namespace {

// Walks a block's body in order; `split`: whether the features are split across the group here.
void split_parts(Sequential& body, TensorGroup& group, bool& split, int& replaced) {
  auto& parts = body.parts();
  for (std::size_t k = 0; k < parts.size(); ++k) {
    Layer* layer = parts[k].get();
    if (auto* inner = dynamic_cast<Sequential*>(layer)) {
      split_parts(*inner, group, split, replaced);
    } else if (auto* linear = dynamic_cast<Linear*>(layer)) {
      const bool packed = k + 1 < parts.size() && dynamic_cast<ScaledDotProductAttention*>(parts[k + 1].get());
      if (split)
        parts[k] = std::make_unique<RowSplitLinear>(linear->options(), group);
      else
        parts[k] = std::make_unique<ColumnSplitLinear>(linear->options(), group, packed ? 3 : 1);
      split = !split;
      ++replaced;
    } else if (auto* attention = dynamic_cast<ScaledDotProductAttention*>(layer)) {
      if (!split) throw InputError(layer->describe() + " follows no split projection");
      parts[k] = attention->share_of_heads(group.size());
    } else if (split && !dynamic_cast<Gelu*>(layer) && !dynamic_cast<Dropout*>(layer)) {
      throw InputError(layer->describe() + " would see a share of the features only");
    }
  }
}

}  // namespace

void split_transformer_block(Residual& block, TensorGroup& group) {
  bool split = false;
  int replaced = 0;
  try {
    split_parts(block.body(), group, split, replaced);
    if (replaced == 0) throw InputError("it holds no linear layer");
    if (split) throw InputError("its last linear layer's output would stay split");
  } catch (const InputError& e) {
    throw InputError(block.describe() + " cannot be split: " + e.what());
  }
}

}  // namespace ddl
