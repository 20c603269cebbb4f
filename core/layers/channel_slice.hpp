// Channels [begin, end) of [N, C, ...], to the last where no end is given or it is past them: ShuffleNet's
// channel split (x.chunk(2, dim=1)), which PyTorch exports as a Slice or a Split along axis 1. Its gradient
// is diff_dst in those channels and zero in the others. The output keeps the input's channel-blocked layout
// where the slice starts and ends on block boundaries, so it is a sub-tensor read in place; else the input
// is read as plain and the output is plain.
#pragma once

#include <optional>

#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

class ChannelSlice : public Layer {
 public:
  ChannelSlice(dnnl::memory::dim begin, std::optional<dnnl::memory::dim> end);
  std::string describe() const override;
  // Throws InputError where the input has no channels [begin, end).
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  // Its output keeps its input's type: it takes bf16 where it may give bf16.
  bool takes_bf16() const override { return output_type_ == dt::bf16; }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_output() const override { return false; }
  bool backward_reads_input() const override { return false; }

 private:
  dnnl::memory::dim begin_;
  std::optional<dnnl::memory::dim> end_;
  dnnl::memory::desc whole_md_, part_md_;  // the input as read (its own layout, or plain), and the slice of it
  std::optional<LeasedCopy> to_plain_;      // where the slice is not a sub-tensor of the input's layout
  std::optional<Copy> take_part_, put_part_, from_plain_;
};

}  // namespace ddl
