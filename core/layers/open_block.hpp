// A residual block or a two-path concatenation opened into the model's own chain, so that a pipeline may
// cut between the layers of its longer path (a U-Net's skip connections span nearly the whole network,
// which as one Residual layer no pipeline could divide). A Fork puts the shorter path's output (its
// shortcut's, or a copy of its input where the path is the identity) into a SideValue; the longer path's
// layers follow it in the chain as the model's own layers; the Join adds the side value to their output,
// or concatenates the two. Where a pipeline cuts between a Fork and its Join, the model sends the side
// value along with the chain's value (Model::keep_layers).
#pragma once

#include <memory>
#include <optional>

#include "core/layers/fused_relu.hpp"
#include "core/layers/relayout.hpp"
#include "core/layers/sequential.hpp"

namespace ddl {

// What a Fork hands past the layers between it and its Join: the Fork's input itself where its shorter path
// is the identity (the model keeps it: the Fork reads its input in backward), else `held`, leased from the
// Fork's forward to the Join's for a copy of the shortcut's output; or at a pipeline stage that receives it,
// `held` for the value unpacked. Where the Join's forward runs again before its backward (a recomputed
// segment), `held` stays till the Fork's backward (or the model's release). Its gradient is leased from the
// Join's backward (or the model's unpacking) to the Fork's backward (or the model's packing).
struct SideValue {
  dims_t dims;              // one image's, the batch not counted: what a stage that receives it sets itself up for
  dnnl::memory::desc desc = {};  // for the current set-up: the value's layout, plain where received
  const Tensor* value = nullptr;
  Tensor held = {}, grad = {};
  bool read_again = false;  // set by the model before each forward
};

class Fork : public Layer {
 public:
  // An empty shortcut is the identity: the side value is then the input itself.
  Fork(std::shared_ptr<SideValue> side, Sequential shortcut);

  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  std::vector<StateView> state() override;
  std::shared_ptr<SideValue> side_opened() const override { return side_; }
  // Its output is its input, which the Join (or the shortcut's backward) reads: not its own to give back.
  bool backward_reads_output() const override { return false; }
  bool backward_reads_input() const override { return true; }
  void release_output(Context&) override {}
  // The side value stays: the Join, in a later segment, reads it.
  void release_activations(Context& ctx) override { shortcut_.release_activations(ctx); }

 private:
  bool identity() const { return shortcut_.empty(); }

  std::shared_ptr<SideValue> side_;
  Sequential shortcut_;
  std::optional<Copy> to_side_;
  std::optional<dnnl::binary> add_diffs_;  // the longer path's gradient and the side value's
};

enum class JoinKind { add, concat_side_first, concat_side_last };

class Join : public Layer {
 public:
  // `relu`: a ReLU after the addition (ResNet's), fused into it.
  Join(std::shared_ptr<SideValue> side, JoinKind kind, bool relu = false);

  std::string describe() const override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  std::shared_ptr<SideValue> side_closed() const override { return side_; }
  bool backward_reads_output() const override { return relu_; }
  bool backward_reads_input() const override { return false; }

 private:
  bool concat() const { return kind_ != JoinKind::add; }

  std::shared_ptr<SideValue> side_;
  JoinKind kind_;
  bool relu_;
  dnnl::memory::desc dst_md_, side_slice_md_, src_slice_md_;
  std::optional<dnnl::binary> add_;
  std::optional<dnnl::concat> concat_;
  Relayout side_to_src_;
  FusedReluBackward relu_backward_;
  std::optional<Copy> diff_to_side_, diff_to_src_;
};

}  // namespace ddl
