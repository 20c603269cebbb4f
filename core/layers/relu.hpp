// Standalone ReLU, max(x, 0), for places where it cannot be fused into the preceding convolution or dense
// layer (after BatchNorm, say). Backward uses the saved output: dx = dy where y > 0.
#pragma once

#include <optional>

#include "core/layers/layer.hpp"

namespace ddl {

class Relu : public Layer {
 public:
  std::string describe() const override { return "relu"; }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  // Its output keeps its input's type: it takes bf16 where it may give bf16.
  bool takes_bf16() const override { return output_type_ == dt::bf16; }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_input() const override { return false; }  // it reads the output

 private:
  dnnl::eltwise_forward fwd_;
  std::optional<dnnl::eltwise_backward> bwd_;
};

}  // namespace ddl
