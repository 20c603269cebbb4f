#include "core/train/sharded_parameters.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/layers/softmax_cross_entropy.hpp"
#include "models/registry.hpp"
#include "tests/core/tensor_util.hpp"

namespace ddl {
namespace {

// Rank 0 of four: a gather copies the owners' values (`owners`) into the range at once, as if the bucket thread
// had done it before the layer before ran; a value given back too early then reads zero.
class FakeReplicas : public SingleProcess {
 public:
  explicit FakeReplicas(std::span<const float> owners) : owners_(owners) {}
  int size() const override { return 4; }
  std::optional<IndexRange> parameter_shard(std::size_t count) const override { return IndexRange{0, count / 4}; }
  std::uint64_t fetch_parameters(std::span<float> params, std::size_t offset, std::size_t count) override {
    fetched.push_back({offset, count});
    std::copy_n(owners_.begin() + static_cast<std::ptrdiff_t>(offset), count, params.begin() + static_cast<std::ptrdiff_t>(offset));
    return fetched.size();
  }
  void await_parameters(std::uint64_t ticket) override { EXPECT_LE(ticket, fetched.size()); }
  void all_gather(std::span<float> values) override {
    ++all_gathers;
    std::copy(owners_.begin(), owners_.end(), values.begin());
  }
  std::vector<ParamRange> fetched;
  int all_gathers = 0;

 private:
  std::span<const float> owners_;
};

std::vector<float> owner_values(std::size_t n) {
  std::vector<float> owners(n);
  for (std::size_t i = 0; i < n; ++i) owners[i] = 1.0f + static_cast<float>(i % 1000);
  return owners;
}

TEST(ShardedParameters, GathersEachLayerAheadAndGivesItBackAfter) {
  // Three layers of 1, 2 and 1 M values (16 MB in all, the first 4 MB this rank's shard), run forward and
  // backward: each is gathered while the one before it runs, the last is kept from its forward for its
  // backward, and what lies outside the shard reads zero once its layer is done (its pages given back).
  constexpr std::size_t M = 1 << 20;
  const ParamRange a{0, M}, b{M, 2 * M}, c{3 * M, M}, none{};
  const std::vector<float> owners = owner_values(4 * M);
  AlignedBuffer<float> buffer(4 * M);
  const std::span<float> params(buffer.data(), buffer.size());
  std::copy(owners.begin(), owners.end(), params.begin());
  FakeReplicas replicas(owners);
  ShardedParameters sharded(replicas, params, *replicas.parameter_shard(params.size()), true);
  const std::size_t in_b = M + M / 2, in_c = 3 * M + M / 2, in_a = M / 2;

  sharded.begin_step();
  EXPECT_EQ(params[in_b], 0.0f);
  EXPECT_EQ(params[in_a], owners[in_a]);  // the shard stays
  sharded.before_layer(a, b);
  EXPECT_EQ(replicas.fetched, (std::vector<ParamRange>{a, b})) << "b is asked for while a runs";
  sharded.after_layer(a);
  sharded.before_layer(b, c);
  EXPECT_EQ(params[in_b], owners[in_b]);
  sharded.after_layer(b);
  EXPECT_EQ(params[in_b], 0.0f);
  sharded.before_layer(c, c);  // the last forward, and its backward next
  sharded.after_layer(c);
  EXPECT_EQ(params[in_c], owners[in_c]);
  sharded.before_layer(c, b);
  sharded.after_layer(c);
  EXPECT_EQ(params[in_c], 0.0f);
  sharded.before_layer(b, a);
  EXPECT_EQ(params[in_b], owners[in_b]);
  sharded.after_layer(b);
  sharded.before_layer(a, none);
  sharded.after_layer(a);
  EXPECT_EQ(replicas.fetched, (std::vector<ParamRange>{a, b, c, b, a}));
  EXPECT_EQ(params[in_a], owners[in_a]);
  EXPECT_EQ(params[in_b], 0.0f);

  // A guess gone wrong (another micro-batch's layer first): the layer asked for is gathered, the other let go.
  sharded.before_layer(a, b);
  sharded.after_layer(a);
  sharded.before_layer(c, none);
  EXPECT_EQ(params[in_c], owners[in_c]);
  EXPECT_EQ(params[in_b], 0.0f);
  sharded.after_layer(c);

  EXPECT_FALSE(sharded.whole());
  sharded.make_whole();
  EXPECT_EQ(replicas.all_gathers, 1);
  EXPECT_TRUE(std::equal(owners.begin(), owners.end(), params.begin()));
  sharded.make_whole();  // already whole: no second all-gather
  EXPECT_EQ(replicas.all_gathers, 1);
  sharded.begin_step();
  EXPECT_EQ(params[in_c], 0.0f);
}

TEST(ShardedParameters, SmallLayersAndTheBlocksTheyShareAreGivenBackButNotTheNextLayers) {
  // Layers of 1.2 MB, smaller than a 2 MB block, each sharing blocks with the next: once a layer has run, the
  // blocks it shares with the one before go back with it, never one holding the next layer's values (gathered
  // ahead) or the shard's. Most of what lies outside the shard ends zero.
  constexpr std::size_t M = 1 << 20, layer = 300'000;
  const std::vector<float> owners = owner_values(4 * M);
  AlignedBuffer<float> buffer(4 * M);
  const std::span<float> params(buffer.data(), buffer.size());
  std::copy(owners.begin(), owners.end(), params.begin());
  FakeReplicas replicas(owners);
  ShardedParameters sharded(replicas, params, *replicas.parameter_shard(params.size()), true);
  std::vector<ParamRange> layers;
  for (std::size_t offset = 0; offset < params.size(); offset += layer)
    layers.push_back({offset, std::min(layer, params.size() - offset)});
  sharded.begin_step();
  for (std::size_t k = 0; k < layers.size(); ++k) {
    sharded.before_layer(layers[k], k + 1 < layers.size() ? layers[k + 1] : ParamRange{});
    for (std::size_t i = layers[k].offset; i < layers[k].offset + layers[k].count; ++i)
      ASSERT_EQ(params[i], owners[i]) << "layer " << k << " runs on its gathered values";
    sharded.after_layer(layers[k]);
    if (k + 1 < layers.size())
      for (std::size_t i = layers[k + 1].offset; i < layers[k + 1].offset + layers[k + 1].count; ++i)
        ASSERT_EQ(params[i], owners[i]) << "layer " << k + 1 << ", gathered ahead, after layer " << k;
  }
  for (std::size_t i = 0; i < M; ++i) ASSERT_EQ(params[i], owners[i]) << "the shard, at " << i;
  std::size_t zero = 0;
  for (std::size_t i = M; i < params.size(); ++i) zero += params[i] == 0.0f;
  EXPECT_GT(static_cast<double>(zero), 0.8 * static_cast<double>(params.size() - M));
}

TEST(ShardedParameters, TheModelNamesTheLayerThatRunsNext) {
  // A training forward and backward, with and without recomputation: every layer with parameters is announced
  // before it runs, each announcement names the next one to run, the last names none, and each run ends with
  // the same layer given back.
  for (const bool recompute : {false, true}) {
    Context ctx;
    auto model = make_model("resnet18_cifar", {.num_classes = 10}, ctx);
    model->initialize(5);
    model->recompute_activations(recompute);
    std::vector<std::pair<ParamRange, ParamRange>> before;
    std::vector<ParamRange> after;
    model->before_layer = [&](ParamRange now, ParamRange next) { before.push_back({now, next}); };
    model->after_layer = [&](ParamRange now) { after.push_back(now); };
    const dims_t dims = {2, 3, 32, 32};
    Tensor x = test::from_plain(ctx, test::random_values(product(dims), 3), plain_desc(dims));
    SoftmaxCrossEntropy loss;
    const std::vector<std::int32_t> labels{1, 7};
    for (int step = 0; step < 2; ++step) {
      before.clear();
      after.clear();
      ctx.begin_step(0);
      loss.forward(ctx, model->forward(ctx, x, Mode::train), labels);
      model->backward(ctx, loss.backward());
      std::size_t with_params = 0;
      for (std::size_t i = 0; i < model->num_layers(); ++i) with_params += model->layer_param_count(i) > 0;
      if (recompute)
        EXPECT_GT(before.size(), 2 * with_params);
      else
        EXPECT_EQ(before.size(), 2 * with_params);
      ASSERT_EQ(after.size(), before.size());
      for (std::size_t k = 0; k < before.size(); ++k) {
        EXPECT_EQ(after[k], before[k].first) << k;
        const ParamRange expected = k + 1 < before.size() ? before[k + 1].first : ParamRange{};
        EXPECT_EQ(before[k].second, expected) << "announcement " << k << (recompute ? ", recomputing" : "");
      }
    }
    model->forward(ctx, x, Mode::infer);  // evaluation runs on whole parameters: no announcements
    EXPECT_EQ(after.size(), before.size());
  }
}

}  // namespace
}  // namespace ddl
