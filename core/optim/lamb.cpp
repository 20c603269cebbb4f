// LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", 2020,
// Algorithm 2, with Adam's bias correction, phi the identity):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  r = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   a weight array w:  u = r + wd w (decay decoupled from the moments, unlike Adam's L2 in the gradient);
//                      w -= lr (||w|| / ||u||) u, the ratio 1 where either norm is 0
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

// u of [begin, end) into u[0, end - begin), with the array's weight decay wd.
DDL_VECTOR_CLONES void lamb_update(std::size_t begin, std::size_t end, const float* __restrict p,
                                   const float* __restrict m, const float* __restrict v, const LambStep k, float wd,
                                   float* __restrict u) {
  for (std::size_t i = begin; i < end; ++i) u[i - begin] = (m[i] * k.c1) / (std::sqrt(v[i] * k.c2) + k.eps) + wd * p[i];
}

class Lamb : public Optimizer {
 public:
  Lamb(std::vector<ParamSegment> segments, std::size_t size, const AdamOptions& o, LayerwiseShard shard)
      : opt_(o), pieces_(std::move(segments), size, std::move(shard)), m_(pieces_.buffer_size()), v_(pieces_.buffer_size()) {
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
    if (params.size() != pieces_.buffer_size() || grads.size() != pieces_.buffer_size())
      throw Error("lamb: " + std::to_string(params.size()) + " parameters given, made for " +
                  std::to_string(pieces_.buffer_size()));
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
    // u is computed twice, for its norm and for the step, rather than kept: a buffer the size of the model.
    const auto norms = pieces_.squared_norms([&](const SegmentPieces::Piece& piece, double& w, double& u) {
      float update[SegmentPieces::kPieceSize];
      lamb_update(piece.begin, piece.end, params.data(), m_.data(), v_.data(), k, decay(piece.segment), update);
      w = sum_of_squares(params.data(), piece.begin, piece.end);
      u = sum_of_squares(update, 0, piece.end - piece.begin);
    });
    std::vector<float> rates(segments.size(), lr);
    for (std::size_t s = 0; s < segments.size(); ++s) {
      const double w = std::sqrt(norms.a[s]), u = std::sqrt(norms.b[s]);
      if (segments[s].adapt && w > 0 && u > 0) rates[s] = static_cast<float>(lr * w / u);
    }
#pragma omp parallel for schedule(static)
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      float update[SegmentPieces::kPieceSize];
      const auto& piece = pieces[p];
      lamb_update(piece.begin, piece.end, params.data(), m_.data(), v_.data(), k, decay(piece.segment), update);
      const float rate = rates[piece.segment];
      for (std::size_t i = piece.begin; i < piece.end; ++i) params[i] -= rate * update[i - piece.begin];
    }
  }

  // Not Adam's names: the decay differs, so an Adam checkpoint does not resume as LAMB.
  std::vector<StateView> state() override {
    return {{"lamb_m", m_.span(), {}}, {"lamb_v", v_.span(), {}}, {"lamb_step", {}, std::span<std::uint64_t>(step_)}};
  }

 private:
  AdamOptions opt_;
  SegmentPieces pieces_;
  AlignedBuffer<float> m_, v_;
  std::uint64_t step_[1] = {0};
};

}  // namespace

std::unique_ptr<Optimizer> make_lamb(std::vector<ParamSegment> segments, std::size_t size, const AdamOptions& options,
                                     LayerwiseShard shard) {
  return std::make_unique<Lamb>(std::move(segments), size, options, std::move(shard));
}

}  // namespace ddl
