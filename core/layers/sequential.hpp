// Layers run one after another, seen from outside as one layer: the body of a residual block, a branch
// of a concatenation. Parameters and state keep the children's order, named "<child>.<name>".
#pragma once

#include <memory>
#include <vector>

#include "core/layers/layer.hpp"

namespace ddl {

class Sequential : public Layer {
 public:
  Sequential() = default;
  explicit Sequential(std::string name) : name_(std::move(name)) {}

  Sequential& add(std::unique_ptr<Layer> layer) {
    layers_.push_back(std::move(layer));
    return *this;
  }
  template <typename L, typename... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_unique<L>(std::forward<Args>(args)...));
  }
  bool empty() const { return layers_.empty(); }
  // Before the model is finalized: a layer may be replaced by its split form (split_linear.hpp).
  std::vector<std::unique_ptr<Layer>>& parts() { return layers_; }

  // The name given, or the children's descriptions joined.
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  // Its last layer gives the type asked for; the types between its layers are chosen here too.
  void set_output_type(const Context& ctx, dt type) override;
  bool takes_bf16() const override { return !layers_.empty() && layers_.front()->takes_bf16(); }
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  std::vector<StateView> state() override;
  // The gradient it returns is its first layer's; its input is its first layer's, its output its last's.
  void release_gradient(Context& ctx) override;
  bool backward_reads_output() const override { return layers_.empty() || layers_.back()->backward_reads_output(); }
  bool backward_reads_input() const override { return layers_.empty() || layers_.front()->backward_reads_input(); }
  void release_output(Context& ctx) override {
    if (!layers_.empty()) layers_.back()->release_output(ctx);
  }
  void release_activations(Context& ctx) override {
    for (auto& l : layers_) l->release_activations(ctx);
  }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace ddl
