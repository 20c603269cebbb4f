// A transformer block split across a tensor group (Megatron-LM, Shoeybi et al., 2019): every rank of the
// group works on the same batch; each holds a share of the attention heads and of the MLP's hidden
// features, so that a block costs one all-reduce of activations in forward and one in backward per pair
// of linear layers:
//   ColumnSplitLinear  (QKV, MLP fc1): this rank's share of the output features, from the whole input,
//                      which every rank holds; backward sums the input gradients over the group.
//   RowSplitLinear     (attention output, MLP fc2): from this rank's share of the input features, a
//                      partial output summed over the group in forward; the bias is added once, after the
//                      sum, and is whole on every rank (its gradient is the same everywhere).
// LayerNorm, the residual additions, the embeddings and the head stay whole on every rank.
#pragma once

#include "core/layers/linear.hpp"
#include "core/layers/residual.hpp"
#include "core/tensor_group.hpp"

namespace ddl {

class ColumnSplitLinear : public Layer {
 public:
  // row_groups: the output features form this many equal groups (Q, K, V: 3), each split alike, so that
  // this rank's output is [Q share | K share | V share].
  ColumnSplitLinear(const LinearOptions& whole, TensorGroup& group, int row_groups = 1);

  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override { part_.bind(views, ctx); }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override { return part_.forward(ctx, src); }
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;

 private:
  LinearOptions whole_;
  TensorGroup& group_;
  int row_groups_;
  Linear part_;
  bool need_diff_src_ = false;
};

class RowSplitLinear : public Layer {
 public:
  RowSplitLinear(const LinearOptions& whole, TensorGroup& group);

  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  void release_gradient(Context& ctx) override { part_.release_gradient(ctx); }

 private:
  LinearOptions whole_;
  TensorGroup& group_;
  Linear part_;  // no bias: it is added after the sum
  ParamView bias_;
  Tensor dst_;
};

// Replaces the linear layers and the attention of a transformer block's body by their split forms, in
// order: a linear layer on whole features is split by columns (by Q, K and V when attention follows it),
// the attention keeps its share of the heads, the next linear layer is split by rows; GELU and dropout
// work on either. Throws InputError when the block holds another layer where the features are split, or
// nothing to split, or the group size does not divide what it must.
void split_transformer_block(Residual& block, TensorGroup& group);

}  // namespace ddl
