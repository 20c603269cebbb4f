// A function applied to each element on oneDNN's eltwise primitives, forward and backward (from the saved
// input), keeping the input's layout: GELU (the exact, erf-based form that PyTorch's nn.GELU and ViT use),
// and for imported graphs sigmoid, tanh, leaky ReLU, clip (ReLU6), hard sigmoid and hard swish. Softmax
// over one axis below.
#pragma once

#include <optional>

#include "core/layers/layer.hpp"

namespace ddl {

class Eltwise : public Layer {
 public:
  // alpha and beta as oneDNN's algorithm defines them (leaky ReLU's slope, clip's bounds...).
  Eltwise(std::string name, dnnl::algorithm algorithm, float alpha = 0.0f, float beta = 0.0f)
      : name_(std::move(name)), algorithm_(algorithm), alpha_(alpha), beta_(beta) {}
  std::string describe() const override { return name_; }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_output() const override { return false; }  // it reads the input
  // Its output has its input's type: bf16 between two linear layers that compute in bf16.
  bool takes_bf16() const override { return output_type_ == dt::bf16; }

 private:
  std::string name_;
  dnnl::algorithm algorithm_;
  float alpha_, beta_;
  dnnl::eltwise_forward fwd_;
  std::optional<dnnl::eltwise_backward> bwd_;
  const Tensor* src_ = nullptr;
};

class Gelu : public Eltwise {
 public:
  Gelu() : Eltwise("gelu", dnnl::algorithm::eltwise_gelu_erf) {}
};

// softmax(x)_i = exp(x_i) / sum_j exp(x_j) along `axis`; backward from the saved output.
class Softmax : public Layer {
 public:
  explicit Softmax(int axis) : axis_(axis) {}
  std::string describe() const override { return "softmax axis " + std::to_string(axis_); }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_input() const override { return false; }  // it reads the output

 private:
  int axis_;
  dnnl::softmax_forward fwd_;
  std::optional<dnnl::softmax_backward> bwd_;
};

}  // namespace ddl
