// Stochastic gradient descent as PyTorch defines it (dampening 0), L2 weight decay added to the gradient:
//   g = grad + wd * p;  v = momentum * v + g;  p -= lr * (nesterov ? g + momentum * v : v)
// With momentum 0 this is p -= lr * g and no velocity is kept.
#include <algorithm>
#include <cstdio>

#include "core/aligned_buffer.hpp"
#include "core/error.hpp"
#include "core/optim/optimizer.hpp"
#include "core/vector_clones.hpp"

namespace ddl {
namespace {

struct SgdStep {
  float lr, wd, mu;
  bool nesterov;
};

// Vectorised for the CPU at hand; the same bits on every one (no contraction). v: null without momentum.
DDL_VECTOR_CLONES void sgd_update(std::size_t begin, std::size_t end, float* __restrict p, const float* __restrict gr,
                                  float* __restrict v, const SgdStep k) {
  if (!v) {
    for (std::size_t i = begin; i < end; ++i) p[i] -= k.lr * (gr[i] + k.wd * p[i]);
    return;
  }
  for (std::size_t i = begin; i < end; ++i) {
    const float g = gr[i] + k.wd * p[i];
    v[i] = k.mu * v[i] + g;
    p[i] -= k.lr * (k.nesterov ? g + k.mu * v[i] : v[i]);
  }
}

constexpr std::size_t kSgdChunk = 1 << 14;  // elements a call

class Sgd : public Optimizer {
 public:
  Sgd(std::size_t size, const SgdOptions& o) : opt_(o), velocity_(o.momentum > 0 ? size : 0) {
    if (o.momentum < 0 || o.weight_decay < 0) throw InputError("sgd: momentum and weight decay must be >= 0");
    if (o.nesterov && o.momentum == 0) throw InputError("sgd: nesterov needs a momentum > 0");
  }

  std::string describe() const override {
    char buf[96];
    std::snprintf(buf, sizeof buf, "sgd momentum=%g%s weight_decay=%g", opt_.momentum, opt_.nesterov ? " nesterov" : "",
                  opt_.weight_decay);
    return buf;
  }

  void step(std::span<float> params, std::span<const float> grads, float lr) override {
    const std::size_t n = params.size();
    const SgdStep k{.lr = lr, .wd = opt_.weight_decay, .mu = opt_.momentum, .nesterov = opt_.nesterov};
    float* velocity = k.mu == 0 ? nullptr : velocity_.data();
#pragma omp parallel for schedule(static)
    for (std::size_t begin = 0; begin < n; begin += kSgdChunk)
      sgd_update(begin, std::min(n, begin + kSgdChunk), params.data(), grads.data(), velocity, k);
  }

  std::vector<StateView> state() override {
    if (velocity_.size() == 0) return {};
    return {{"velocity", velocity_.span(), {}}};
  }

 private:
  SgdOptions opt_;
  AlignedBuffer<float> velocity_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(std::size_t size, const SgdOptions& options) {
  return std::make_unique<Sgd>(size, options);
}

}  // namespace ddl
