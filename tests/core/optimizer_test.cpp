#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "core/optim/lr_schedule.hpp"
#include "core/optim/optimizer.hpp"

namespace ddl {
namespace {

TEST(Sgd, PlainStepWithWeightDecay) {
  auto sgd = make_sgd(2, {.momentum = 0.0f, .weight_decay = 0.1f});
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, 0.25f};
  sgd->step(p, g, 0.1f);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.1f * (0.5f + 0.1f * 1.0f));
  EXPECT_FLOAT_EQ(p[1], -2.0f - 0.1f * (0.25f + 0.1f * -2.0f));
  EXPECT_TRUE(sgd->state().empty());
}

TEST(Sgd, MomentumAccumulatesVelocity) {
  auto sgd = make_sgd(1, {.momentum = 0.9f});
  std::vector<float> p = {1.0f}, g = {1.0f};
  sgd->step(p, g, 0.1f);  // v = 1, p = 0.9
  EXPECT_FLOAT_EQ(p[0], 0.9f);
  sgd->step(p, g, 0.1f);  // v = 1.9, p = 0.71
  EXPECT_FLOAT_EQ(p[0], 0.71f);
  EXPECT_FLOAT_EQ(sgd->state().at(0).floats[0], 1.9f);
}

TEST(Sgd, NesterovLooksAhead) {
  auto sgd = make_sgd(1, {.momentum = 0.9f, .nesterov = true});
  std::vector<float> p = {1.0f}, g = {1.0f};
  sgd->step(p, g, 0.1f);  // v = 1, p -= 0.1 * (1 + 0.9 * 1)
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.19f);
  sgd->step(p, g, 0.1f);  // v = 1.9, p -= 0.1 * (1 + 0.9 * 1.9)
  EXPECT_FLOAT_EQ(p[0], 0.81f - 0.1f * 2.71f);
}

TEST(Adam, FirstTwoStepsByHand) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, lr = 0.01f;
  auto adam = make_adam(1, {.beta1 = b1, .beta2 = b2, .epsilon = eps});
  std::vector<float> p = {0.5f};
  std::vector<float> g = {0.2f};
  adam->step(p, g, lr);
  // m = 0.02, v = 4e-5; m_hat = 0.2, v_hat = 0.04: step = lr * 0.2 / (0.2 + eps)
  EXPECT_NEAR(p[0], 0.5f - lr * 0.2f / (0.2f + eps), 1e-7);
  g = {-0.1f};
  adam->step(p, g, lr);
  const double m = 0.9 * 0.02 + 0.1 * -0.1, v = 0.999 * 4e-5 + 0.001 * 0.01;
  const double m_hat = m / (1 - 0.81), v_hat = v / (1 - 0.998001);
  EXPECT_NEAR(p[0], 0.5 - lr * 0.2 / (0.2 + eps) - lr * m_hat / (std::sqrt(v_hat) + eps), 1e-6);
  EXPECT_EQ(adam->state().at(2).words[0], 2u);
}

// LARS and LAMB against references written from the papers' formulas in double, on three arrays (a weight
// matrix spread over several of the optimizers' pieces, a bias, a small weight) with a gap between them, for
// three steps of random gradients.
struct Arrays {
  std::vector<ParamSegment> segments = {{0, 40000, true}, {40000, 10, false}, {40016, 6, true}};
  std::size_t size = 40022;
  std::vector<float> params, grads[3];
  Arrays() {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    params.resize(size);
    for (float& p : params) p = 0.1f * normal(rng);
    for (auto& g : grads) {
      g.resize(size);
      for (float& x : g) x = 0.01f * normal(rng);
    }
  }
  double norm(const std::vector<double>& x, const ParamSegment& s) const {
    double sum = 0;
    for (std::size_t i = s.offset; i < s.offset + s.count; ++i) sum += x[i] * x[i];
    return std::sqrt(sum);
  }
  void expect_near(const std::vector<float>& got, const std::vector<double>& want) const {
    double worst = 0;
    for (std::size_t i = 0; i < size; ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    EXPECT_LT(worst, 2e-6);
  }
};

TEST(Lars, MatchesThePapersFormulaPerLayer) {
  const Arrays a;
  const double lr = 2.0, mu = 0.9, wd = 5e-4, eta = 0.02;
  auto lars = make_lars(a.segments, a.size, {.momentum = 0.9f, .weight_decay = 5e-4f, .eta = 0.02f});
  std::vector<float> p = a.params;
  std::vector<double> w(a.params.begin(), a.params.end()), v(a.size, 0.0);
  for (const auto& g : a.grads) {
    lars->step(p, g, static_cast<float>(lr));
    const std::vector<double> gd(g.begin(), g.end());
    for (const auto& s : a.segments) {
      const double wn = a.norm(w, s), gn = a.norm(gd, s);
      const double local = s.adapt ? eta * wn / (gn + wd * wn) : 1.0, decay = s.adapt ? wd : 0.0;
      for (std::size_t i = s.offset; i < s.offset + s.count; ++i) {
        v[i] = mu * v[i] + lr * local * (gd[i] + decay * w[i]);
        w[i] -= v[i];
      }
    }
  }
  a.expect_near(p, w);
  // An array at zero keeps the plain learning rate (trust ratio 1) rather than never moving.
  auto fresh = make_lars({{0, 2, true}}, 2, {.momentum = 0.0f, .eta = 0.02f});
  std::vector<float> zero = {0.0f, 0.0f}, grad = {1.0f, -1.0f};
  fresh->step(zero, grad, 0.5f);
  EXPECT_FLOAT_EQ(zero[0], -0.5f);
}

TEST(Lars, AZeroGradientWithWeightDecayKeepsThePlainRate) {
  // ||g|| = 0: the ratio is 1 (as in the paper's reference code), not eta / wd.
  auto lars = make_lars({{0, 2, true}}, 2, {.momentum = 0.0f, .weight_decay = 0.1f, .eta = 0.02f});
  std::vector<float> p = {1.0f, 2.0f}, g = {0.0f, 0.0f};
  lars->step(p, g, 0.5f);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.5f * 0.1f * 1.0f);
  EXPECT_FLOAT_EQ(p[1], 2.0f - 0.5f * 0.1f * 2.0f);
}

TEST(Lamb, MatchesThePapersFormulaPerLayer) {
  const Arrays a;
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-6, wd = 0.01;
  auto lamb = make_lamb(a.segments, a.size, {.beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-6f, .weight_decay = 0.01f});
  std::vector<float> p = a.params;
  std::vector<double> w(a.params.begin(), a.params.end()), m(a.size, 0.0), v(a.size, 0.0), u(a.size, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const auto& g = a.grads[t - 1];
    lamb->step(p, g, static_cast<float>(lr));
    for (const auto& s : a.segments) {
      for (std::size_t i = s.offset; i < s.offset + s.count; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        u[i] = (m[i] / (1 - std::pow(b1, t))) / (std::sqrt(v[i] / (1 - std::pow(b2, t))) + eps) +
               (s.adapt ? wd * w[i] : 0.0);
      }
      const double ratio = s.adapt ? a.norm(w, s) / a.norm(u, s) : 1.0;
      for (std::size_t i = s.offset; i < s.offset + s.count; ++i) w[i] -= lr * ratio * u[i];
    }
  }
  a.expect_near(p, w);
  EXPECT_EQ(lamb->state().at(2).words[0], 3u);
}

TEST(LayerwiseOptimizers, GiveTheSameBitsOnAnyThreadCount) {
  // Replicas may run different thread counts; each layer's norm is summed in the same order on every one.
  const Arrays a;
  const int threads = omp_get_max_threads();
  std::vector<float> results[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run == 0 ? 1 : 4);
    auto lars = make_lars(a.segments, a.size, {.weight_decay = 5e-4f, .eta = 0.02f});
    auto lamb = make_lamb(a.segments, a.size, {.weight_decay = 0.01f});
    results[run] = a.params;
    for (const auto& g : a.grads) {
      lars->step(results[run], g, 2.0f);
      lamb->step(results[run], g, 0.01f);
    }
  }
  omp_set_num_threads(threads);
  EXPECT_TRUE(results[0] == results[1]);
}

// Replicas, each a thread here, adding up the sums of squares of their shards: every one's figures added
// into one total, which each then reads (the barrier's completion clears it between rounds).
class ThreadsSum {
 public:
  explicit ThreadsSum(int replicas) : sync_(replicas, Clear{this}) {}
  void operator()(std::span<double> sums) {
    {
      std::lock_guard lock(mutex_);
      total_.resize(sums.size());
      for (std::size_t i = 0; i < sums.size(); ++i) total_[i] += sums[i];
    }
    sync_.arrive_and_wait();
    std::copy(total_.begin(), total_.end(), sums.begin());
    sync_.arrive_and_wait();
  }

 private:
  struct Clear {
    ThreadsSum* sum;
    void operator()() noexcept {
      if (++sum->rounds_ % 2 == 0) std::fill(sum->total_.begin(), sum->total_.end(), 0.0);
    }
  };
  std::barrier<Clear> sync_;
  std::mutex mutex_;
  std::vector<double> total_;
  int rounds_ = 0;
};

TEST(LayerwiseOptimizers, ShardedUpdateTheirShardWithTheWholeArraysNorms) {
  // Three replicas' shards cut the weight matrix and the bias: each updates only its own values, with the
  // trust ratios of the whole arrays (the sums in another order: within 1e-6 relative of one optimizer's).
  // A fourth holds nothing, and adds its zeros all the same.
  const Arrays a;
  const IndexRange shards[] = {{0, 13000}, {13000, 40005}, {40005, 40005}, {40005, a.size}};
  for (const bool lamb : {false, true}) {
    const auto make = [&](LayerwiseShard shard) {
      return lamb ? make_lamb(a.segments, a.size, {.weight_decay = 0.01f}, std::move(shard))
                  : make_lars(a.segments, a.size, {.weight_decay = 5e-4f, .eta = 0.02f}, std::move(shard));
    };
    const float lr = lamb ? 0.01f : 2.0f;
    std::vector<float> whole = a.params, sharded = a.params;
    auto one = make({});
    for (const auto& g : a.grads) one->step(whole, g, lr);
    ThreadsSum sum(static_cast<int>(std::size(shards)));
    std::vector<std::thread> replicas;
    for (const IndexRange& shard : shards)
      replicas.emplace_back([&, shard] {
        auto optimizer = make({shard, [&](std::span<double> sums) { sum(sums); }});
        for (const auto& g : a.grads)
          optimizer->step(std::span(sharded).subspan(shard.begin, shard.size()),
                          std::span(g).subspan(shard.begin, shard.size()), lr);
        EXPECT_EQ(optimizer->state().at(0).floats.size(), shard.size());
      });
    for (auto& r : replicas) r.join();
    std::size_t moved = 0, off = 0;
    for (std::size_t i = 0; i < a.size; ++i) {
      moved += whole[i] != a.params[i];
      off += std::abs(whole[i] - sharded[i]) > 1e-6f * std::abs(whole[i]) + 1e-12f;
    }
    EXPECT_GT(moved, a.size / 2) << (lamb ? "lamb" : "lars");
    EXPECT_EQ(off, 0u) << (lamb ? "lamb" : "lars");
  }
}

TEST(LayerwiseOptimizers, RefuseArraysOutsideTheBuffer) {
  EXPECT_THROW(make_lars({{0, 10, true}, {5, 10, true}}, 20, {}), InputError);
  EXPECT_THROW(make_lamb({{0, 30, true}}, 20, {}), InputError);
}

TEST(LrSchedule, ConstantStepCosineAndWarmup) {
  LrSchedule constant{.policy = LrPolicy::constant, .base_lr = 0.1f};
  EXPECT_FLOAT_EQ(constant.at(7.5), 0.1f);
  LrSchedule step{.policy = LrPolicy::step, .base_lr = 1.0f, .step_epochs = 2, .gamma = 0.5f};
  EXPECT_FLOAT_EQ(step.at(1.9), 1.0f);
  EXPECT_FLOAT_EQ(step.at(2.0), 0.5f);
  EXPECT_FLOAT_EQ(step.at(5.0), 0.25f);
  LrSchedule cosine{.policy = LrPolicy::cosine, .base_lr = 1.0f, .total_epochs = 10};
  EXPECT_FLOAT_EQ(cosine.at(0), 1.0f);
  EXPECT_NEAR(cosine.at(5), 0.5f, 1e-6);
  EXPECT_NEAR(cosine.at(10), 0.0f, 1e-6);
  LrSchedule warm{.policy = LrPolicy::constant, .base_lr = 1.0f, .warmup_epochs = 2};
  EXPECT_FLOAT_EQ(warm.at(1.0), 0.5f);
  EXPECT_FLOAT_EQ(warm.at(2.0), 1.0f);
  EXPECT_GT(warm.at(0.0), 0.0f);
  LrSchedule poly{.policy = LrPolicy::poly, .base_lr = 2.0f, .total_epochs = 10, .power = 2.0f};
  EXPECT_FLOAT_EQ(poly.at(0), 2.0f);
  EXPECT_NEAR(poly.at(5), 0.5f, 1e-6);
  EXPECT_NEAR(poly.at(10), 0.0f, 1e-6);
}

}  // namespace
}  // namespace ddl
