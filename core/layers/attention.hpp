// Multi-head scaled dot-product attention (Vaswani et al., 2017) on a packed projection:
//   input [N, T, 3D] = [Q | K | V], each split into H heads of d = D / H features,
//   out_h = dropout(softmax(Q_h K_h^T / sqrt(d))) V_h, heads written side by side into [N, T, D].
// Heads are strided views of the input and output (no copies); the matmuls are batched over N and H.
// multi_head_self_attention() puts it between the input and output projections.
#pragma once

#include <memory>
#include <optional>

#include "core/layers/batched_matmul.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/sequential.hpp"

namespace ddl {

class ScaledDotProductAttention : public Layer {
 public:
  ScaledDotProductAttention(int dim, int heads, float dropout, std::uint64_t seed);

  int heads() const { return heads_; }
  // The same attention over heads / parts of the heads (a tensor group's share of them).
  std::unique_ptr<ScaledDotProductAttention> share_of_heads(int parts) const;
  std::string describe() const override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  std::vector<StateView> state() override { return dropout_.state(); }
  // The dropped-out scores are leased (the scores themselves are owned, and stay).
  void release_activations(Context& ctx) override {
    Layer::release_activations(ctx);
    dropout_.release_activations(ctx);
  }
  // It takes and gives bf16 between two linear layers that compute in bf16.
  bool takes_bf16() const override { return output_type_ == dt::bf16; }

 private:
  float dropout_p_;
  std::uint64_t seed_;
  // One head-batched view [N, H, T, d] of the packed input (part 0, 1, 2 = Q, K, V) or of the output.
  dnnl::memory part(Context& ctx, const Tensor& packed, int which) const;
  dnnl::memory heads_of(Context& ctx, const Tensor& out) const;

  int dim_, heads_;
  Mode mode_ = Mode::train;
  dnnl::memory::desc packed_part_md_, out_heads_md_;
  BatchedMatmul scores_, mix_;  // S = Q K^T / sqrt(d);  O = P V
  // Softmax runs in place (S becomes P, dP becomes dS): the [N, H, T, T] tensors dominate the memory.
  dnnl::softmax_forward softmax_;
  std::optional<dnnl::softmax_backward> softmax_backward_;
  Dropout dropout_;
  bool use_dropout_ = false;
  Tensor weights_, dst_;
  const Tensor* src_ = nullptr;
  const Tensor* probs_ = nullptr;  // the P that multiplied V: after dropout, when there is one
};

// Linear(D -> 3D), attention, Linear(D -> D): PyTorch's nn.MultiheadAttention as used by ViT.
std::unique_ptr<Sequential> multi_head_self_attention(int dim, int heads, float dropout, std::uint64_t seed);

}  // namespace ddl
