// Parallel branches over the same input, their outputs concatenated along the channel axis (axis 1), as in
// Inception and DenseNet blocks: dst = [branch_0(src), branch_1(src), ...]. The output is plain (nchw or
// nc...), or channel-blocked where the branches' outputs are and every part fills whole blocks, so each
// branch's slice of the gradient is a sub-tensor of it. An empty branch is the identity: src itself goes
// into the concatenation (DenseNet's [x, f(x)]).
#pragma once

#include <optional>

#include "core/layers/relayout.hpp"
#include "core/layers/sequential.hpp"

namespace ddl {

class Concat : public Layer {
 public:
  Concat(std::string name, std::vector<Sequential> branches);

  std::string describe() const override { return name_; }
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  std::vector<StateView> state() override;
  void release_activations(Context& ctx) override {
    Layer::release_activations(ctx);
    for (auto& branch : branches_) branch.release_activations(ctx);
  }

 private:
  std::string name_;
  std::vector<Sequential> branches_;

  dnnl::concat concat_;
  Tensor dst_;
  std::vector<dnnl::memory::desc> slice_mds_;  // each branch's part of the output
  std::vector<Copy> slice_to_branch_;
  std::vector<Tensor> branch_grads_;
  std::optional<dnnl::sum> sum_diffs_;
};

}  // namespace ddl
