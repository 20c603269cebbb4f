// Stochastic gradient descent as PyTorch defines it (dampening 0), L2 weight decay added to the gradient:
//   g = grad + wd * p;  v = momentum * v + g;  p -= lr * (nesterov ? g + momentum * v : v)
// With momentum 0 this is p -= lr * g and no velocity is kept.
#include <cstdio>

#include "core/aligned_buffer.hpp"
#include "core/error.hpp"
#include "core/optim/optimizer.hpp"

namespace ddl {
namespace {

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
    float* __restrict p = params.data();
    const float* __restrict gr = grads.data();
    const float wd = opt_.weight_decay, mu = opt_.momentum;
    if (mu == 0) {
#pragma omp parallel for simd schedule(static)
      for (std::size_t i = 0; i < n; ++i) p[i] -= lr * (gr[i] + wd * p[i]);
      return;
    }
    float* __restrict v = velocity_.data();
    const bool nesterov = opt_.nesterov;
#pragma omp parallel for simd schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
      const float g = gr[i] + wd * p[i];
      v[i] = mu * v[i] + g;
      p[i] -= lr * (nesterov ? g + mu * v[i] : v[i]);
    }
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
