// Layer normalisation over the last axis (Ba et al., 2016), as in transformers:
//   y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta, statistics per position, gamma/beta per feature.
// oneDNN's layer_normalization primitive; the batch statistics of forward are kept for backward. It takes
// f32 (a transformer's residual stream stays f32) and, in bf16, gives bf16 to the linear layer after it:
// oneDNN 2 normalises within one type, so the f32 result goes through a leased buffer and is converted,
// and the bf16 output gradient is converted back to f32 the same way.
#pragma once

#include <optional>

#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

struct LayerNormOptions {
  int features = 0;
  float epsilon = 1e-6f;  // ViT's (torchvision) value; PyTorch's nn.LayerNorm default is 1e-5
};

class LayerNorm : public Layer {
 public:
  explicit LayerNorm(const LayerNormOptions& options);

  std::string describe() const override { return "layer_norm " + std::to_string(opt_.features); }
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_output() const override { return false; }  // it reads its input

 private:
  LayerNormOptions opt_;
  ParamMemory scale_, shift_;
  Mode mode_ = Mode::train;
  dnnl::layer_normalization_forward fwd_;
  std::optional<dnnl::layer_normalization_backward> bwd_;
  dnnl::memory::desc normalized_md_;  // f32, the primitive's output
  std::optional<Copy> to_output_type_, diff_to_f32_;
  Tensor mean_, variance_;
  const Tensor* src_ = nullptr;
};

}  // namespace ddl
