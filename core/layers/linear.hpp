// A fully connected layer applied to every position of a sequence: input [N, T, I] (or [N, I]), output
// [N, T, O] = input @ weight^T + bias, weights OI as in PyTorch's nn.Linear. Runs on oneDNN's matmul over
// the plain tensors a transformer passes around; the weight's transpose is a strided view, not a copy.
#pragma once

#include "core/layers/batched_matmul.hpp"
#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

struct LinearOptions {
  int in_features = 0;
  int out_features = 0;
  bool bias = true;
  Init init = Init::glorot_uniform;
};

class Linear : public Layer {
 public:
  explicit Linear(const LinearOptions& options);

  const LinearOptions& options() const { return opt_; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool backward_reads_output() const override { return false; }  // it reads its input
  bool takes_bf16() const override { return true; }

 private:
  void sum_rows(const Tensor& diff_dst, float* out) const;

  LinearOptions opt_;
  ParamMemory weights_t_, bias_;  // weights seen as [I, O] (the transpose of the stored OI)
  bool need_diff_src_ = false;
  Mode mode_ = Mode::train;

  Relayout to_plain_, diff_to_src_layout_;
  BatchedMatmul matmul_;
  dnnl::memory::desc rows_md_, out_rows_md_;  // input and output seen as [rows, features]
  const Tensor* src_ = nullptr;
};

}  // namespace ddl
