// Batch normalisation over N, H, W per channel (oneDNN), with learnable scale gamma and shift beta:
//   y = gamma * (x - mean) / sqrt(var + eps) + beta.
// Training uses the batch's statistics and updates running ones as PyTorch does (momentum 0.1, unbiased
// variance); inference uses the running statistics. Those are state, saved in checkpoints.
// An optional ReLU is fused (oneDNN's fuse_norm_relu: a bit mask in the workspace drives its backward), which
// saves a ReLU layer's output and gradient buffers, a third of a ResNet's activation memory.
// A plain [N, C, H, W] input is normalised in the layout ddl's convolutions give (channel-blocked on most CPUs,
// a copy of the input kept for backward): the layout its input has where a convolution makes it. So a
// pipeline stage that starts with it, whose input comes plain, sums as the whole model does, bit for bit,
// and the blocked kernels are the faster.
#pragma once

#include <optional>

#include "core/aligned_buffer.hpp"
#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

struct BatchNorm2dOptions {
  int channels = 0;
  float epsilon = 1e-5f;
  float momentum = 0.1f;
  bool relu = false;
};

class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(const BatchNorm2dOptions& options);

  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  // Its output keeps its input's type (statistics, scale and shift stay f32): it takes bf16 where it may
  // give bf16.
  bool takes_bf16() const override { return output_type_ == dt::bf16; }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  // It reads its source, statistics and workspace (a fused ReLU's mask), never its output.
  bool backward_reads_output() const override { return false; }
  std::vector<StateView> state() override;

 private:
  // A rank-3 tensor's memory seen as primitive_md_'s rank 4; any other tensor's own.
  dnnl::memory as_primitive(Context& ctx, const Tensor& t) const;

  BatchNorm2dOptions opt_;
  ParamMemory scale_, shift_;
  AlignedBuffer<float> running_mean_, running_var_;
  Mode mode_ = Mode::train;
  std::size_t reduced_count_ = 0;

  dnnl::batch_normalization_forward fwd_;
  std::optional<dnnl::batch_normalization_backward> bwd_;
  Tensor mean_, variance_, workspace_;
  dnnl::memory running_mean_mem_, running_var_mem_;
  const Tensor* src_ = nullptr;
  dnnl::memory::desc primitive_md_;  // the input as the primitives see it (rank 3 as rank 4, plain as blocked)
  LeasedCopy to_blocked_;            // a plain input's copy, held from forward to backward
  std::optional<Copy> diff_to_plain_;
};

}  // namespace ddl
