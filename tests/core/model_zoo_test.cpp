// The seeds' larger models: published parameter counts, a training step at full size, and loss falling
// on the small variants.
#include <gtest/gtest.h>

#include "core/layers/softmax_cross_entropy.hpp"
#include "core/optim/optimizer.hpp"
#include "models/registry.hpp"
#include "tests/core/tensor_util.hpp"

namespace ddl {
namespace {

struct Published {
  const char* name;
  std::size_t parameters;  // torchvision's figure at 1,000 classes
};

class PublishedSize : public ::testing::TestWithParam<Published> {};

TEST_P(PublishedSize, ParameterCountAndOneTrainingStep) {
  Context ctx;
  auto model = make_model(GetParam().name, {.num_classes = 1000, .seed = 1}, ctx);
  EXPECT_EQ(model->param_count(), GetParam().parameters);
  model->initialize(1);
  const dims_t& s = model->input_shape();
  EXPECT_EQ(s, (dims_t{3, 224, 224}));
  const dims_t dims = {1, s[0], s[1], s[2]};
  Tensor x = test::from_plain(ctx, test::random_values(product(dims), 2, 0, 1), plain_desc(dims));
  SoftmaxCrossEntropy loss;
  const std::vector<std::int32_t> label = {7};
  const LossSums sums = loss.forward(ctx, model->forward(ctx, x, Mode::train), label);
  EXPECT_TRUE(std::isfinite(sums.loss));
  model->backward(ctx, loss.backward());
  double grad_norm = 0;
  for (float g : model->grads()) grad_norm += static_cast<double>(g) * g;
  EXPECT_GT(grad_norm, 0.0);
  EXPECT_TRUE(std::isfinite(grad_norm));
}

INSTANTIATE_TEST_SUITE_P(Torchvision, PublishedSize,
                         ::testing::Values(Published{"alexnet", 61'100'840}, Published{"vgg16", 138'357'544},
                                           Published{"resnet18", 11'689'512}, Published{"resnet50", 25'557'032},
                                           Published{"vit_b16", 86'567'656}),
                         [](const auto& info) { return std::string(info.param.name); });

struct Variant {
  const char* name;
  int steps;
  float learning_rate = 1e-3f;
};

class SmallVariant : public ::testing::TestWithParam<Variant> {};

// Adam steps on one fixed batch of 16 random images: the loss must fall to under half its start.
TEST_P(SmallVariant, LossFallsOnAFixedBatch) {
  Context ctx;
  const char* name = GetParam().name;
  auto model = make_model(name, {.num_classes = 10, .seed = 3, .dropout = 0.0f}, ctx);
  model->initialize(3);
  auto adam = make_adam(model->param_count(), {});
  SoftmaxCrossEntropy loss;
  const dims_t dims = {16, 3, 32, 32};
  Tensor x = test::from_plain(ctx, test::random_values(product(dims), 4, 0, 1), plain_desc(dims));
  std::vector<std::int32_t> labels(16);
  for (int i = 0; i < 16; ++i) labels[i] = i % 10;
  double first = 0, last = 0;
  for (int step = 0; step < GetParam().steps; ++step) {
    const LossSums sums = loss.forward(ctx, model->forward(ctx, x, Mode::train), labels);
    (step == 0 ? first : last) = sums.loss / 16;
    model->backward(ctx, loss.backward());
    adam->step(model->params(), model->grads(), GetParam().learning_rate);
  }
  EXPECT_LT(last, 0.5 * first) << name << ": loss " << first << " -> " << last;
}

INSTANTIATE_TEST_SUITE_P(Cifar, SmallVariant,
                         ::testing::Values(Variant{"alexnet_cifar", 50}, Variant{"vgg16_cifar", 30, 1e-4f},
                                           Variant{"resnet18_cifar", 20}, Variant{"resnet50_cifar", 10},
                                           Variant{"vit_tiny", 45}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ResNet, BatchNormStatisticsOfEveryBlockAreCheckpointState) {
  Context ctx;
  auto model = make_model("resnet18_cifar", {}, ctx);
  const auto state = model->state();
  // stem 1 + 8 blocks x 2 + 3 projection shortcuts = 20 BatchNorms, each a running mean and variance.
  EXPECT_EQ(state.size(), 40u);
  EXPECT_EQ(state.front().name, "0.1.running_mean");
  EXPECT_EQ(state.back().name, "8.body.3.running_var");
}

TEST(VisionTransformer, ShapeOptionsAreHonouredAndCheckedAtBuild) {
  Context ctx;
  auto model = make_model("vit_tiny", {.image_size = 48, .patch_size = 8, .depth = 3, .width = 96, .heads = 6}, ctx);
  EXPECT_EQ(model->input_shape(), (dims_t{3, 48, 48}));
  const std::string summary = model->summary(ctx);
  EXPECT_NE(summary.find("37 tokens"), std::string::npos) << summary;
  EXPECT_NE(summary.find("encoder 2 mlp"), std::string::npos) << summary;
  EXPECT_THROW(make_model("vit_tiny", {.image_size = 30}, ctx), InputError);
  EXPECT_THROW(make_model("vit_tiny", {.width = 64, .heads = 5}, ctx), InputError);
}

}  // namespace
}  // namespace ddl
