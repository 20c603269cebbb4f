// Padding of [N, C, H, W] images with a constant: rows above and below, columns left and right, as ONNX's
// Pad (constant mode) and a convolution's uneven pads give them (a convolution pads every side alike).
// Or ONNX's auto_pad SAME_UPPER / SAME_LOWER of a convolution's window: the padding that gives it
// ceil(size / stride) outputs, worked out from the input at set-up, the odd row and column at the end (upper)
// or at the start (lower). The output keeps the input's channel-blocked layout where the padding is zero;
// else it is plain.
#pragma once

#include <optional>

#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

struct Pad2dOptions {
  int top = 0, left = 0, bottom = 0, right = 0;
  float value = 0;
  // auto_pad SAME of a window with this kernel (0: the sides above are given), stride and dilation.
  int same_kernel = 0, same_stride = 1, same_dilation = 1;
  bool same_lower = false;
};

class Pad2d : public Layer {
 public:
  explicit Pad2d(const Pad2dOptions& options);
  std::string describe() const override;
  // Throws InputError for an input that is not [N, C, H, W].
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_output() const override { return false; }
  bool backward_reads_input() const override { return false; }

 private:
  Pad2dOptions opt_;
  dnnl::memory::desc inner_md_;  // the input's place in the output
  std::optional<Copy> to_inner_, from_inner_;
};

}  // namespace ddl
