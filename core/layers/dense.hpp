// Fully connected layer on oneDNN's inner product: dst[n, o] = bias[o] + sum_i weight[o, i] * src[n, i],
// input [N, I] (put a Flatten before it), weights OI as in PyTorch, optional fused ReLU post-op.
#pragma once

#include <optional>

#include "core/layers/fused_relu.hpp"
#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"
#include "core/layers/weight_gradients.hpp"
#include "core/layers/weight_relayout.hpp"

namespace ddl {

struct DenseOptions {
  int in_features = 0;
  int out_features = 0;
  bool bias = true;
  bool relu = false;
  Init init = Init::glorot_uniform;
};

class Dense : public Layer {
 public:
  explicit Dense(const DenseOptions& options);

  const DenseOptions& options() const { return opt_; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  bool takes_bf16() const override { return true; }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_output() const override { return opt_.relu; }  // the fused ReLU's
  bool accumulate_gradients(bool on) override {
    weight_gradients_.set_accumulate(on);
    return true;
  }

 private:
  DenseOptions opt_;
  ParamMemory weights_, bias_;
  Mode mode_ = Mode::train;

  dnnl::inner_product_forward fwd_;
  Relayout fwd_src_;  // to the compute type (bf16), or nothing to do
  WeightRelayout fwd_weights_;
  Relayout bwd_diff_dst_;
  const Tensor* src_ = nullptr;

  FusedReluBackward relu_backward_;
  dnnl::inner_product_backward_weights bwd_weights_;
  WeightGradients weight_gradients_;
  std::optional<dnnl::inner_product_backward_data> bwd_data_;
  bool reuse_forward_weights_ = false;
  WeightRelayout bwd_data_weights_;
};

}  // namespace ddl
