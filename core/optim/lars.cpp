// LARS (You, Gitman and Ginsburg, "Large Batch Training of Convolutional Networks", 2017, Algorithm 1), with
// momentum applied as there and in MLPerf's ResNet-50 reference:
//   a weight array w:  local = eta ||w|| / (||g|| + wd ||w||), 1 where ||w|| or ||g|| is 0;  u = g + wd w
//   a bias or normalisation array:  local = 1;  u = g (neither adapted nor decayed)
//   v = momentum v + lr local u;  w -= v
#include <cmath>
#include <cstdio>

#include "core/aligned_buffer.hpp"
#include "core/error.hpp"
#include "core/optim/layerwise.hpp"
#include "core/optim/optimizer.hpp"
#include "core/vector_clones.hpp"

namespace ddl {
namespace {

struct LarsStep {
  float lr, wd, mu;  // lr: the array's own, the trust ratio applied
};

DDL_VECTOR_CLONES void lars_update(std::size_t begin, std::size_t end, float* __restrict p, const float* __restrict g,
                                   float* __restrict v, const LarsStep k) {
  for (std::size_t i = begin; i < end; ++i) {
    v[i] = k.mu * v[i] + k.lr * (g[i] + k.wd * p[i]);
    p[i] -= v[i];
  }
}

class Lars : public Optimizer {
 public:
  Lars(std::vector<ParamSegment> segments, std::size_t size, const LarsOptions& o, LayerwiseShard shard)
      : opt_(o), pieces_(std::move(segments), size, std::move(shard)), velocity_(pieces_.buffer_size()) {
    if (!(o.momentum >= 0 && o.weight_decay >= 0 && o.eta > 0))
      throw InputError("lars: momentum and weight decay must be >= 0, the trust coefficient > 0");
  }

  std::string describe() const override {
    char buf[96];
    std::snprintf(buf, sizeof buf, "lars momentum=%g trust=%g weight_decay=%g", opt_.momentum, opt_.eta,
                  opt_.weight_decay);
    return buf;
  }

  void step(std::span<float> params, std::span<const float> grads, float lr) override {
    if (params.size() != pieces_.buffer_size() || grads.size() != pieces_.buffer_size())
      throw Error("lars: " + std::to_string(params.size()) + " parameters given, made for " +
                  std::to_string(pieces_.buffer_size()));
    const auto norms = pieces_.squared_norms([&](const SegmentPieces::Piece& piece, double& w, double& g) {
      w = sum_of_squares(params.data(), piece.begin, piece.end);
      g = sum_of_squares(grads.data(), piece.begin, piece.end);
    });
    const auto& segments = pieces_.segments();
    std::vector<LarsStep> steps(segments.size(), {lr, 0.0f, opt_.momentum});
    for (std::size_t s = 0; s < segments.size(); ++s) {
      if (!segments[s].adapt) continue;
      const double w = std::sqrt(norms.a[s]), g = std::sqrt(norms.b[s]);
      // 1 where the gradient is 0 too (a layer behind a BatchNorm scale at zero), not eta / wd.
      if (w > 0 && g > 0) steps[s].lr = static_cast<float>(lr * opt_.eta * w / (g + opt_.weight_decay * w));
      steps[s].wd = opt_.weight_decay;
    }
    const auto& pieces = pieces_.pieces();
#pragma omp parallel for schedule(static)
    for (std::size_t p = 0; p < pieces.size(); ++p)
      lars_update(pieces[p].begin, pieces[p].end, params.data(), grads.data(), velocity_.data(),
                  steps[pieces[p].segment]);
  }

  // Not SGD's "velocity": this one has the learning rate in it.
  std::vector<StateView> state() override { return {{"lars_velocity", velocity_.span(), {}}}; }

 private:
  LarsOptions opt_;
  SegmentPieces pieces_;
  AlignedBuffer<float> velocity_;
};

}  // namespace

std::unique_ptr<Optimizer> make_lars(std::vector<ParamSegment> segments, std::size_t size, const LarsOptions& options,
                                     LayerwiseShard shard) {
  return std::make_unique<Lars>(std::move(segments), size, options, std::move(shard));
}

}  // namespace ddl
