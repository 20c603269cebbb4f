#include <gtest/gtest.h>

#include <cmath>

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
}

}  // namespace
}  // namespace ddl
