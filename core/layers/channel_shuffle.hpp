// ShuffleNet's channel shuffle of [N, C, ...] in `groups`: the channels seen as [groups, C / groups] and
// transposed, so each group's next convolution reads channels from every group of the one before. PyTorch
// writes it as x.view(N, groups, C / groups, H, W).transpose(1, 2).reshape(N, C, H, W), which the ONNX
// import recognises (models/onnx/fuse_patterns.hpp). On oneDNN's shuffle primitive, in the input's layout.
#pragma once

#include <optional>

#include "core/layers/layer.hpp"

namespace ddl {

class ChannelShuffle : public Layer {
 public:
  // `image`, where given, is the [C, H, W] the input must have (an imported graph's reshapes name it).
  explicit ChannelShuffle(int groups, dims_t image = {});
  std::string describe() const override { return "channel shuffle in " + std::to_string(groups_) + " groups"; }
  // Throws InputError where the groups do not divide the input's channels.
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  bool takes_bf16() const override { return output_type_ == dt::bf16; }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_output() const override { return false; }
  bool backward_reads_input() const override { return false; }

 private:
  int groups_;
  dims_t image_;
  std::optional<dnnl::shuffle_forward> forward_;
  std::optional<dnnl::shuffle_backward> backward_;
};

}  // namespace ddl
