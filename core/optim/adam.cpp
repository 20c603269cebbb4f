// Adam (Kingma & Ba) as PyTorch computes it, L2 weight decay added to the gradient:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/aligned_buffer.hpp"
#include "core/error.hpp"
#include "core/optim/optimizer.hpp"
#include "core/vector_clones.hpp"

namespace ddl {
namespace {

struct AdamStep {
  float b1, b2, c1, c2, eps, wd, lr;  // c1, c2: the bias corrections 1 / (1 - beta^t)
};

// Vectorised for the CPU at hand (needs -fno-math-errno); the same bits on every one (no contraction).
DDL_VECTOR_CLONES void adam_update(std::size_t begin, std::size_t end, float* __restrict p,
                                   const float* __restrict gr, float* __restrict m, float* __restrict v,
                                   const AdamStep k) {
  for (std::size_t i = begin; i < end; ++i) {
    const float g = gr[i] + k.wd * p[i];
    m[i] = k.b1 * m[i] + (1 - k.b1) * g;
    v[i] = k.b2 * v[i] + (1 - k.b2) * g * g;
    p[i] -= k.lr * (m[i] * k.c1) / (std::sqrt(v[i] * k.c2) + k.eps);
  }
}

constexpr std::size_t kAdamChunk = 1 << 14;  // elements a call

class Adam : public Optimizer {
 public:
  Adam(std::size_t size, const AdamOptions& o) : opt_(o), m_(size), v_(size) {
    if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1))
      throw InputError("adam: betas must be in [0, 1)");
    if (!(o.epsilon > 0) || o.weight_decay < 0) throw InputError("adam: epsilon must be > 0, weight decay >= 0");
  }

  std::string describe() const override {
    char buf[96];
    std::snprintf(buf, sizeof buf, "adam beta1=%g beta2=%g eps=%g weight_decay=%g", opt_.beta1, opt_.beta2,
                  opt_.epsilon, opt_.weight_decay);
    return buf;
  }

  void step(std::span<float> params, std::span<const float> grads, float lr) override {
    const double t = ++step_[0];
    const AdamStep k{.b1 = opt_.beta1,
                     .b2 = opt_.beta2,
                     .c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(opt_.beta1), t))),
                     .c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(opt_.beta2), t))),
                     .eps = opt_.epsilon,
                     .wd = opt_.weight_decay,
                     .lr = lr};
    const std::size_t n = params.size();
    // Memory-bound and element-wise: spread over the compute threads in chunks.
#pragma omp parallel for schedule(static)
    for (std::size_t begin = 0; begin < n; begin += kAdamChunk)
      adam_update(begin, std::min(n, begin + kAdamChunk), params.data(), grads.data(), m_.data(), v_.data(), k);
  }

  std::vector<StateView> state() override {
    return {{"m", m_.span(), {}}, {"v", v_.span(), {}}, {"step", {}, std::span<std::uint64_t>(step_)}};
  }

 private:
  AdamOptions opt_;
  AlignedBuffer<float> m_, v_;
  std::uint64_t step_[1] = {0};
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(std::size_t size, const AdamOptions& options) {
  return std::make_unique<Adam>(size, options);
}

}  // namespace ddl
