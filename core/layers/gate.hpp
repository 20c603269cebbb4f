// A gate, dst = src * gate(src): over channels, as squeeze-and-excitation blocks have it (Hu et al., 2018),
// where the gate's path (global pooling, two 1x1 convolutions, a sigmoid) gives one factor an image and a
// channel, [N, C, 1, 1], broadcast over the plane; one factor an image, [N, 1, 1, 1] (stochastic depth's
// mask); or element by element, where the path gives src's shape
// (an imported graph's SiLU and hard swish are one eltwise instead: models/onnx). Backward: the
// gradient reaches src directly (diff_dst times the factors) and through the path, from the factors'
// gradient, diff_dst times src (summed over the plane for channel factors, and over the channels too for
// an image's). One layer, like a residual
// block: a pipeline never separates the two uses of src.
#pragma once

#include <optional>

#include "core/layers/relayout.hpp"
#include "core/layers/sequential.hpp"

namespace ddl {

class Gate : public Layer {
 public:
  Gate(std::string name, Sequential path);

  std::string describe() const override { return name_; }
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  // f32 throughout: the factors multiply every activation, and a gate's costs are small.
  void set_output_type(const Context& ctx, dt /*type*/) override { path_.set_output_type(ctx, dt::f32); }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  std::vector<StateView> state() override;
  bool backward_reads_output() const override { return false; }
  void release_activations(Context& ctx) override {
    Layer::release_activations(ctx);
    path_.release_activations(ctx);
  }

 private:
  std::string name_;
  Sequential path_;
  dnnl::binary scale_;  // src times the factors
  // Backward: diff_dst times the factors, and times src; the plane's sum of the latter; the two gradients' sum.
  std::optional<dnnl::binary> scale_diff_, times_src_, add_diffs_;
  // Channel factors: the plane's mean by oneDNN's pooling, times the plane's size (its reduction runs a
  // reference kernel on channel-blocked layouts, 10 times slower).
  std::optional<dnnl::pooling_forward> mean_plane_;
  float plane_size_ = 1.0f;
  std::optional<Copy> to_factors_layout_;  // the factors' gradient from the mean's or the product's layout
  dnnl::memory::desc src_md_, factors_md_, plane_mean_md_;
  // One factor an image: its gradient summed over the channels into per_image_md_, [N, 1, 1, 1] plain. (A
  // default desc is no false in oneDNN 3, where it is a handle: the flag says it.)
  bool per_image_ = false;
  dnnl::memory::desc per_image_md_;
  const Tensor* src_ = nullptr;
  const Tensor* factors_ = nullptr;
};

}  // namespace ddl
