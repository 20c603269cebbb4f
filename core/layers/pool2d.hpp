// 2-D pooling on oneDNN: max, average (padding counted or not), and global average or maximum (the kernel
// covers the whole input plane, output [N, C, 1, 1]). Output size floor((H + 2 * padding - kernel) / stride) + 1, or
// with ceil_mode the ceiling, as PyTorch has it: a last window that starts inside the input or its left
// padding is kept (the padding on the right grows for it; average pooling that counts padding then refuses,
// since PyTorch does not count that growth).
// Max pooling keeps oneDNN's workspace (the argmax positions) from forward for backward.
#pragma once

#include <optional>

#include "core/layers/fused_relu.hpp"
#include "core/layers/layer.hpp"

namespace ddl {

enum class PoolKind { max, avg_include_padding, avg_exclude_padding, global_avg, global_max };

struct Pool2dOptions {
  PoolKind kind = PoolKind::max;
  int kernel = 2;
  int stride = 2;
  int padding = 0;
  bool ceil_mode = false;
};

class Pool2d : public Layer {
 public:
  explicit Pool2d(const Pool2dOptions& options);

  std::string describe() const override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  // Its output keeps its input's type: it takes bf16 where it may give bf16.
  bool takes_bf16() const override { return output_type_ == dt::bf16; }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  // Max pooling's backward reads the workspace; average pooling's nothing but the output gradient.
  bool backward_reads_input() const override { return false; }
  bool backward_reads_output() const override { return relu_backward_of_previous_; }  // the moved ReLU's
  bool can_take_relu_backward() const override { return opt_.kind == PoolKind::max; }

 private:
  Pool2dOptions opt_;
  dnnl::pooling_forward fwd_;
  std::optional<dnnl::pooling_backward> bwd_;
  FusedReluBackward previous_relu_backward_;  // where the previous layer's ReLU backward moved here
  Tensor workspace_;
};

}  // namespace ddl
