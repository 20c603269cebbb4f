// LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", 2020,
// Algorithm 2, with Adam's bias correction, phi the identity):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  r = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   a weight array w:  u = r + wd w;  w -= lr (||w|| / ||u||) u
//   a bias or normalisation array:  w -= lr r (neither adapted nor decayed)
#include <cmath>
#include <cstdio>

#include "core/aligned_buffer.hpp"
#include "core/error.hpp"
#include "core/optim/layerwise.hpp"
#include "core/optim/optimizer.hpp"
#include "core/vector_clones.hpp"

namespace ddl {
namespace {

struct LambStep {
  float b1, b2, c1, c2, eps;  // c1, c2: the bias corrections 1 / (1 - beta^t)
};

DDL_VECTOR_CLONES void lamb_moments(std::size_t begin, std::size_t end, const float* __restrict g, float* __restrict m,
                                    float* __restrict v, const LambStep k) {
  for (std::size_t i = begin; i < end; ++i) {
    m[i] = k.b1 * m[i] + (1 - k.b1) * g[i];
    v[i] = k.b2 * v[i] + (1 - k.b2) * g[i] * g[i];
  }
}

// The update u of element i, with the array's weight decay wd.
inline float lamb_update(const float* p, const float* m, const float* v, std::size_t i, const LambStep& k, float wd) {
  return (m[i] * k.c1) / (std::sqrt(v[i] * k.c2) + k.eps) + wd * p[i];
}

// sum of u^2 over [begin, end), in a fixed order (as sum_of_squares).
double sum_of_update_squares(std::size_t begin, std::size_t end, const float* p, const float* m, const float* v,
                             const LambStep& k, float wd) {
  double lane[8] = {};
  for (std::size_t i = begin; i < end; ++i) {
    const double u = lamb_update(p, m, v, i, k, wd);
    lane[(i - begin) % 8] += u * u;
  }
  double sum = 0;
  for (double l : lane) sum += l;
  return sum;
}

DDL_VECTOR_CLONES void lamb_apply(std::size_t begin, std::size_t end, float* __restrict p, const float* __restrict m,
                                  const float* __restrict v, const LambStep k, float wd, float lr) {
  for (std::size_t i = begin; i < end; ++i) p[i] -= lr * lamb_update(p, m, v, i, k, wd);
}

class Lamb : public Optimizer {
 public:
  Lamb(std::vector<ParamSegment> segments, std::size_t size, const AdamOptions& o)
      : opt_(o), pieces_(std::move(segments), size), m_(size), v_(size) {
    if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1))
      throw InputError("lamb: betas must be in [0, 1)");
    if (!(o.epsilon > 0) || o.weight_decay < 0) throw InputError("lamb: epsilon must be > 0, weight decay >= 0");
  }

  std::string describe() const override {
    char buf[96];
    std::snprintf(buf, sizeof buf, "lamb beta1=%g beta2=%g eps=%g weight_decay=%g", opt_.beta1, opt_.beta2,
                  opt_.epsilon, opt_.weight_decay);
    return buf;
  }

  void step(std::span<float> params, std::span<const float> grads, float lr) override {
    const double t = ++step_[0];
    const LambStep k{.b1 = opt_.beta1,
                     .b2 = opt_.beta2,
                     .c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(opt_.beta1), t))),
                     .c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(opt_.beta2), t))),
                     .eps = opt_.epsilon};
    const auto& pieces = pieces_.pieces();
    const auto& segments = pieces_.segments();
    auto decay = [&](std::size_t segment) { return segments[segment].adapt ? opt_.weight_decay : 0.0f; };
#pragma omp parallel for schedule(static)
    for (std::size_t p = 0; p < pieces.size(); ++p)
      lamb_moments(pieces[p].begin, pieces[p].end, grads.data(), m_.data(), v_.data(), k);
    const auto norms = pieces_.squared_norms([&](const SegmentPieces::Piece& piece, double& w, double& u) {
      w = sum_of_squares(params.data(), piece.begin, piece.end);
      u = sum_of_update_squares(piece.begin, piece.end, params.data(), m_.data(), v_.data(), k, decay(piece.segment));
    });
    std::vector<float> rates(segments.size(), lr);
    for (std::size_t s = 0; s < segments.size(); ++s)
      if (segments[s].adapt) rates[s] = static_cast<float>(lr * trust_ratio(std::sqrt(norms.a[s]), std::sqrt(norms.b[s])));
#pragma omp parallel for schedule(static)
    for (std::size_t p = 0; p < pieces.size(); ++p)
      lamb_apply(pieces[p].begin, pieces[p].end, params.data(), m_.data(), v_.data(), k, decay(pieces[p].segment),
                 rates[pieces[p].segment]);
  }

  // Adam's moments and step count, by the same definitions.
  std::vector<StateView> state() override {
    return {{"m", m_.span(), {}}, {"v", v_.span(), {}}, {"step", {}, std::span<std::uint64_t>(step_)}};
  }

 private:
  AdamOptions opt_;
  SegmentPieces pieces_;
  AlignedBuffer<float> m_, v_;
  std::uint64_t step_[1] = {0};
};

}  // namespace

std::unique_ptr<Optimizer> make_lamb(std::vector<ParamSegment> segments, std::size_t size, const AdamOptions& options) {
  return std::make_unique<Lamb>(std::move(segments), size, options);
}

}  // namespace ddl
