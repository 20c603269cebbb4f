#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "core/layers/softmax_cross_entropy.hpp"
#include "tests/core/tensor_util.hpp"

namespace ddl {
namespace {

TEST(SoftmaxCrossEntropy, ValueMatchesHandComputation) {
  Context ctx;
  SoftmaxCrossEntropy loss;
  Tensor z = test::from_plain(ctx, {1, 2, 3, 0, 0, 0}, plain_desc({2, 3}));
  std::vector<std::int32_t> labels = {2, 1};
  const auto sums = loss.forward(ctx, z, labels);
  const double row0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
  const double row1 = std::log(3.0);
  EXPECT_NEAR(sums.loss, row0 + row1, 1e-5);
  EXPECT_EQ(sums.correct, 1u);  // row 0 predicts 2 (right); row 1 ties, argmax 0 (wrong)
  EXPECT_EQ(sums.count, 2u);
}

TEST(SoftmaxCrossEntropy, StableForHugeLogits) {
  Context ctx;
  SoftmaxCrossEntropy loss;
  Tensor z = test::from_plain(ctx, {1000, -1000, 0}, plain_desc({1, 3}));
  std::vector<std::int32_t> labels = {1};
  const auto sums = loss.forward(ctx, z, labels);
  EXPECT_NEAR(sums.loss, 2000.0, 1e-3);
  const float* g = loss.backward().data();
  EXPECT_NEAR(g[0], 1.0f, 1e-6);
  EXPECT_NEAR(g[1], -1.0f, 1e-6);
}

// Label smoothing 0.1 over 3 classes: targets 0.1/3 everywhere and 0.9 more at the label (PyTorch's
// CrossEntropyLoss(label_smoothing=0.1) gives 2.3076 for row 0 and 1.0986 for row 1).
TEST(SoftmaxCrossEntropy, SmoothedLabelsMatchHandComputation) {
  Context ctx;
  SoftmaxCrossEntropy loss(0.1f);
  Tensor z = test::from_plain(ctx, {1, 2, 3, 0, 0, 0}, plain_desc({2, 3}));
  std::vector<std::int32_t> labels = {0, 1};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double row0 = lse - 0.9 * 1.0 - 0.1 / 3 * (1.0 + 2.0 + 3.0);
  EXPECT_NEAR(row0, 2.3076, 1e-4);
  EXPECT_NEAR(loss.forward(ctx, z, labels).loss, row0 + std::log(3.0), 1e-5);
  // d(mean)/dz = (softmax - q) / 2: row 1 is uniform, so its gradient is (1/3 - q) / 2.
  const float* g = loss.backward().data();
  EXPECT_NEAR(g[3], (1.0 / 3 - 0.1 / 3) / 2, 1e-6);
  EXPECT_NEAR(g[4], (1.0 / 3 - 0.9 - 0.1 / 3) / 2, 1e-6);
  EXPECT_THROW(SoftmaxCrossEntropy(1.0f), InputError);
  EXPECT_THROW(SoftmaxCrossEntropy(-0.1f), InputError);
}

class SoftmaxCrossEntropyGradient : public ::testing::TestWithParam<float> {};
INSTANTIATE_TEST_SUITE_P(LabelSmoothing, SoftmaxCrossEntropyGradient, ::testing::Values(0.0f, 0.1f, 0.5f));

TEST_P(SoftmaxCrossEntropyGradient, MatchesFiniteDifferences) {
  Context ctx;
  SoftmaxCrossEntropy loss(GetParam());
  const std::size_t n = 3, k = 5;
  auto values = test::random_values(n * k, 5, -3, 3);
  std::vector<std::int32_t> labels = {4, 0, 2};
  auto mean_loss = [&](const std::vector<float>& v) {
    Tensor z = test::from_plain(ctx, v, plain_desc({3, 5}));
    return loss.forward(ctx, z, labels).loss / n;
  };
  Tensor z = test::from_plain(ctx, values, plain_desc({3, 5}));
  loss.forward(ctx, z, labels);
  const std::vector<float> analytic(loss.backward().data(), loss.backward().data() + n * k);
  for (std::size_t i = 0; i < n * k; ++i) {
    auto up = values, down = values;
    up[i] += 1e-2f;
    down[i] -= 1e-2f;
    EXPECT_NEAR(analytic[i], (mean_loss(up) - mean_loss(down)) / 2e-2, 2e-4) << "logit " << i;
  }
}

TEST(SoftmaxCrossEntropy, RejectsLabelsOutOfRange) {
  Context ctx;
  SoftmaxCrossEntropy loss;
  Tensor z = test::from_plain(ctx, {0, 0}, plain_desc({1, 2}));
  std::vector<std::int32_t> labels = {2};
  EXPECT_THROW(loss.forward(ctx, z, labels), InputError);
}

}  // namespace
}  // namespace ddl
