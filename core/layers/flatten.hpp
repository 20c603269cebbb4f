// Flatten [N, C, H, W] (any layout) to [N, C*H*W] in C, H, W order, the order PyTorch and the OIHW/OI
// weight layouts use, so a checkpoint's dense weights mean the same thing as elsewhere. The only place
// where a blocked activation is reordered back to a plain one.
#pragma once

#include <optional>

#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

class Flatten : public Layer {
 public:
  std::string describe() const override { return "flatten"; }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  // Its output keeps its input's type: it takes bf16 where it may give bf16.
  bool takes_bf16() const override { return output_type_ == dt::bf16; }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;

 private:
  dnnl::memory::desc src_md_;
  std::optional<Copy> to_plain_, to_src_layout_;
  Tensor dst_;
  dnnl::memory dst_as_plain_src_;
  bool need_diff_src_ = false;
};

}  // namespace ddl
