// A dense layer split by output features across a tensor group (Megatron-LM's column split): each of the
// T ranks holds T-th of the weight rows and of the bias, computes its share of the outputs for the whole
// batch, and the group all-gathers the shares, so every rank goes on with the whole output. In backward
// each rank takes its share of the output gradient, computes its weight gradient from it, and the group
// sums the input gradients, each rank having contributed its features' part.
//
// The first split layer of a model is also where the group's batch is gathered (gathers_batch): in
// training each rank brings the features of its own images, the layer all-gathers them, and everything
// from here on (the loss too) works on the group's whole batch; in backward the input gradients are
// reduce-scattered back to the rank that owns each image. The loss is then the mean over the group's T
// images per rank, so each rank's share is multiplied by T to be the gradient of the mean over its own
// images, as in data parallelism, before the layers below average it with every other copy. In
// evaluation every rank of the group brings the same images, and the layer gathers none.
#pragma once

#include "core/layers/dense.hpp"
#include "core/tensor_group.hpp"

namespace ddl {

class SplitDense : public Layer {
 public:
  // whole: the layer as a single rank would hold it; group.size() must divide its output features.
  SplitDense(const DenseOptions& whole, TensorGroup& group, bool gathers_batch);

  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override { part_.bind(views, ctx); }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool accumulate_gradients(bool on) override { return part_.accumulate_gradients(on); }
  void release_gradient(Context& ctx) override;

 private:
  DenseOptions whole_;
  TensorGroup& group_;
  bool gathers_batch_;
  Dense part_;  // this rank's output features
  bool gather_now_ = false;  // gathers_batch_, in training
  bool need_diff_src_ = false;
  Tensor group_src_;         // the group's batch of inputs, when gathering
  Tensor pieces_, dst_;      // every rank's output share, rank after rank; the whole output
  Tensor diff_part_;         // this rank's share of the output gradient
};

}  // namespace ddl
