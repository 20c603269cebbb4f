// 2-D convolution on oneDNN's direct convolution, NCHW logical shapes:
//   dst[n, o, y, x] = bias[o] + sum_{c, i, j} weight[o, c, i, j] * src[n, g*C/G + c, y*stride + i*dilation - pad,
//                                                                       x*stride + j*dilation - pad]
// with g = o / (O/G) the group of output channel o and c over the group's C/G input channels (G = groups:
// 1 for an ordinary convolution, C for a depthwise one, as in MobileNet). An optional ReLU is fused as a
// oneDNN post-op (its backward then runs from the saved output, or in the max-pool that follows: see
// move_relu_backward_into_pools).
// Weights are kept in the flat buffer as OIHW ([O, C/G, kh, kw], PyTorch's shape; oneDNN reads the same
// bytes as [G, O/G, C/G, kh, kw]); oneDNN's preferred blocked layout is a reorder away.
#pragma once

#include <optional>

#include "core/layers/fused_relu.hpp"
#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"
#include "core/layers/weight_gradients.hpp"

namespace ddl {

struct Conv2dOptions {
  int in_channels = 0;
  int out_channels = 0;
  int kernel = 3;
  int stride = 1;
  int padding = 0;
  int dilation = 1;  // 1: no gaps between the kernel's taps
  int groups = 1;
  bool bias = true;
  bool relu = false;
  Init init = Init::glorot_uniform;
};

class Conv2d : public Layer {
 public:
  explicit Conv2d(const Conv2dOptions& options);

  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  bool takes_bf16() const override { return true; }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_output() const override { return opt_.relu && !relu_backward_in_next_; }  // the fused ReLU's
  bool ends_in_relu() const override { return opt_.relu; }
  bool accumulate_gradients(bool on) override {
    weight_gradients_.set_accumulate(on);
    return true;
  }

 private:
  Conv2dOptions opt_;
  dims_t weights_dims_;  // as oneDNN sees them: [O, C, kh, kw], or [G, O/G, C/G, kh, kw] in groups
  ParamMemory weights_, bias_;
  bool need_diff_src_ = false;
  Mode mode_ = Mode::train;

  dnnl::convolution_forward fwd_;
  Relayout fwd_src_;
  LeasedCopy fwd_weights_;
  const Tensor* src_ = nullptr;

  FusedReluBackward relu_backward_;
  dnnl::convolution_backward_weights bwd_weights_;
  Relayout bwd_weights_src_, bwd_weights_diff_dst_;
  WeightGradients weight_gradients_;
  std::optional<dnnl::convolution_backward_data> bwd_data_;
  bool reuse_forward_weights_ = false, reuse_weights_diff_dst_ = false;
  LeasedCopy bwd_data_weights_;
  Relayout bwd_data_diff_dst_;
  Tensor diff_src_raw_;
  std::optional<Copy> diff_src_to_input_layout_;
};

}  // namespace ddl
