#include "core/layers/attention.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/layers/linear.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

using memory = dnnl::memory;

ScaledDotProductAttention::ScaledDotProductAttention(int dim, int heads, float dropout, std::uint64_t seed)
    : dropout_p_(dropout), seed_(seed), dim_(dim), heads_(heads), dropout_(dropout, seed) {
  if (dim <= 0 || heads <= 0 || dim % heads != 0)
    throw InputError("attention: width " + std::to_string(dim) + " is not a positive multiple of " +
                     std::to_string(heads) + " heads");
}

std::unique_ptr<ScaledDotProductAttention> ScaledDotProductAttention::share_of_heads(int parts) const {
  if (parts < 1 || heads_ % parts != 0)
    throw InputError(describe() + ": " + std::to_string(parts) + " ranks do not split its " + std::to_string(heads_) +
                     " heads evenly");
  return std::make_unique<ScaledDotProductAttention>(dim_ / parts, heads_ / parts, dropout_p_, seed_);
}

std::string ScaledDotProductAttention::describe() const {
  return "attention " + std::to_string(heads_) + " heads x " + std::to_string(dim_ / heads_);
}

memory::desc ScaledDotProductAttention::setup(Context& ctx, const memory::desc& src_md, Mode mode,
                                              bool need_diff_src) {
  const dims_t in = dims_of(src_md);
  if (in.size() != 3 || in[2] != 3 * dim_)
    throw InputError(describe() + ": expects input [N, T, " + std::to_string(3 * dim_) + "], got " + to_string(in));
  // In bf16 the input, the scores and probabilities and the output are bf16: the products round them to
  // bf16 anyway (as PyTorch's autocast does), and softmax and its backward accumulate in f32.
  const dt type = data_type_of(src_md);
  if (src_md != plain_desc(in, type)) throw Error(describe() + ": expects a plain input (a linear layer's output)");
  mode_ = mode;
  const memory::dim n = in[0], t = in[1], h = heads_, d = dim_ / heads_, D = dim_;
  packed_part_md_ = memory::desc({n, h, t, d}, type, dims_t{t * 3 * D, d, 3 * D, 1});
  out_heads_md_ = memory::desc({n, h, t, d}, type, dims_t{t * D, d, D, 1});
  const memory::desc scores_md = plain_desc({n, h, t, t}, type);
  const bool train = mode == Mode::train;
  scores_ = BatchedMatmul(ctx, packed_part_md_, BatchedMatmul::transposed(packed_part_md_), scores_md,
                          1.0f / std::sqrt(static_cast<float>(d)), train);
  mix_ = BatchedMatmul(ctx, scores_md, packed_part_md_, out_heads_md_, 1.0f, train);
  weights_ = Tensor(scores_md, ctx.engine());
  const auto prop = train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const auto softmax_pd = make_softmax_forward_pd(ctx.engine(), prop, scores_md, 3);
  softmax_ = dnnl::softmax_forward(softmax_pd);
  use_dropout_ = train && dropout_.probability() > 0.0f;
  if (use_dropout_) dropout_.setup(ctx, scores_md, mode, true);
  dst_ = Tensor(plain_desc({n, t, D}, type), ctx.engine());
  softmax_backward_.reset();
  if (train) {
    softmax_backward_ =
        dnnl::softmax_backward(make_softmax_backward_pd(ctx.engine(), scores_md, scores_md, 3, softmax_pd));
    // Backward writes every element of the packed gradient (the Q, K and V parts), needed or not: the K
    // and V parts are the attention's real output towards the projection's weights.
    diff_src_.reset(src_md);
  }
  (void)need_diff_src;
  return dst_.desc();
}

memory ScaledDotProductAttention::part(Context& ctx, const Tensor& packed, int which) const {
  auto* base = static_cast<std::byte*>(packed.memory().get_data_handle());
  const std::size_t element_bytes = memory::data_type_size(data_type_of(packed_part_md_));
  return memory(packed_part_md_, ctx.engine(), base + which * dim_ * element_bytes);
}

memory ScaledDotProductAttention::heads_of(Context& ctx, const Tensor& out) const {
  return memory(out_heads_md_, ctx.engine(), out.memory().get_data_handle());
}

const Tensor& ScaledDotProductAttention::forward(Context& ctx, const Tensor& src) {
  src_ = &src;
  const memory q = part(ctx, src, 0), k = part(ctx, src, 1), v = part(ctx, src, 2);
  const memory k_t(BatchedMatmul::transposed(packed_part_md_), ctx.engine(), k.get_data_handle());
  scores_.forward(ctx, q, k_t, weights_.memory());
  softmax_.execute(ctx.stream(), {{DNNL_ARG_SRC, weights_.memory()}, {DNNL_ARG_DST, weights_.memory()}});
  probs_ = use_dropout_ ? &dropout_.forward(ctx, weights_) : &weights_;
  mix_.forward(ctx, probs_->memory(), v, heads_of(ctx, dst_));
  return dst_;
}

const Tensor& ScaledDotProductAttention::backward(Context& ctx, const Tensor& diff_dst) {
  if (mode_ != Mode::train) throw Error(describe() + ": backward called on a layer set up for inference");
  const memory q = part(ctx, *src_, 0), k = part(ctx, *src_, 1), v = part(ctx, *src_, 2);
  const Tensor& diff_src = diff_src_.get(ctx);
  const memory dq = part(ctx, diff_src, 0), dk = part(ctx, diff_src, 1), dv = part(ctx, diff_src, 2);
  // The [N, H, T, T] gradient is needed only here: leased, given back at the end.
  Tensor diff_weights = ctx.lease(weights_.desc());
  // dP = dO V^T and dV = P^T dO, then back through dropout and softmax to dS.
  mix_.backward(ctx, probs_->memory(), v, heads_of(ctx, diff_dst), diff_weights.memory(), dv);
  const Tensor& diff_probs = use_dropout_ ? dropout_.backward(ctx, diff_weights) : diff_weights;
  softmax_backward_->execute(ctx.stream(), {{DNNL_ARG_DST, weights_.memory()},
                                            {DNNL_ARG_DIFF_DST, diff_probs.memory()},
                                            {DNNL_ARG_DIFF_SRC, diff_weights.memory()}});
  if (use_dropout_) dropout_.release_gradient(ctx);
  const Tensor& diff_scores = diff_weights;
  // dQ = dS K / sqrt(d) and dK^T = Q^T dS / sqrt(d), the latter written through K's transposed view.
  const memory k_t(BatchedMatmul::transposed(packed_part_md_), ctx.engine(), k.get_data_handle());
  const memory dk_t(BatchedMatmul::transposed(packed_part_md_), ctx.engine(), dk.get_data_handle());
  scores_.backward(ctx, q, k_t, diff_scores.memory(), dq, dk_t);
  ctx.give_back(diff_weights);
  return diff_src;
}

std::unique_ptr<Sequential> multi_head_self_attention(int dim, int heads, float dropout, std::uint64_t seed) {
  auto s = std::make_unique<Sequential>("self-attention " + std::to_string(dim) + ", " + std::to_string(heads) +
                                        " heads");
  s->emplace<Linear>(LinearOptions{.in_features = dim, .out_features = 3 * dim});
  s->emplace<ScaledDotProductAttention>(dim, heads, dropout, seed);
  s->emplace<Linear>(LinearOptions{.in_features = dim, .out_features = dim});
  return s;
}

}  // namespace ddl
