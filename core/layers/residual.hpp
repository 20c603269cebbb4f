// A residual block: dst = body(src) + shortcut(src), optionally followed by a ReLU (ResNet's blocks) fused
// into the addition. An empty shortcut is the identity. The block is one layer, so a model cut into
// pipeline stages never separates a block's two paths.
#pragma once

#include <optional>

#include "core/layers/fused_relu.hpp"
#include "core/layers/relayout.hpp"
#include "core/layers/sequential.hpp"

namespace ddl {

class Residual : public Layer {
 public:
  Residual(std::string name, Sequential body, Sequential shortcut = Sequential(), bool relu = false);

  std::string describe() const override { return name_; }
  Sequential& body() { return body_; }
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  // Both paths give their output in the block's output type, which the addition keeps.
  void set_output_type(const Context& ctx, dt type) override {
    output_type_ = type;
    body_.set_output_type(ctx, type);
    shortcut_.set_output_type(ctx, type);
  }
  bool takes_bf16() const override { return body_.takes_bf16() && (identity() || shortcut_.takes_bf16()); }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  std::vector<StateView> state() override;
  bool backward_reads_output() const override { return relu_; }  // the fused ReLU's
  void release_output(Context& ctx) override {
    if (sum_in_place_)
      body_.release_output(ctx);
    else
      output_.give_back(ctx);
  }
  void release_activations(Context& ctx) override {
    body_.release_activations(ctx);
    shortcut_.release_activations(ctx);
    output_.give_back(ctx);
  }

 private:
  bool identity() const { return shortcut_.empty(); }

  std::string name_;
  Sequential body_, shortcut_;
  bool relu_;

  dnnl::binary add_;
  Relayout shortcut_to_dst_;  // the shortcut's output (or the input itself) in the body's output layout
  bool sum_in_place_ = false;  // the output is the body's, overwritten by the sum
  const Tensor* dst_ = nullptr;
  FusedReluBackward relu_backward_;
  Relayout diff_to_shortcut_;  // the gradient in the layout the shortcut's output (or the input) has
  std::optional<dnnl::binary> add_diffs_;
};

}  // namespace ddl
