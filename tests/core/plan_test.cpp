// The planner on hand-made profiles: which layout it chooses when links are fast or slow and memory is
// short, that its choice is the fastest of an exhaustive enumeration, that its byte counts are ddl_train's,
// and that it plans a thousand ranks from a saved profile.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <optional>

#include "core/error.hpp"
#include "core/plan/recalibrate.hpp"
#include "core/recompute_segments.hpp"
#include "core/plan/search.hpp"

namespace ddl {
namespace {

LayerCost layer(const std::string& name, double seconds, double params, double in, double out,
                SplitKind split = SplitKind::none, int divisor = 0) {
  return {name, seconds, params, in, out, split, divisor};
}

// seed_cnn as ddl builds it: sizes exact (f32 bytes per image), times made up.
Profile seed_cnn_profile(const Link& link) {
  Profile p;
  p.model = "seed_cnn";
  p.batch = 32;
  p.optimizer_s_per_param = 1e-9;
  p.base_bytes = 50e6;
  p.layers = {layer("conv2d 3->32", 2e-5, 896, 3 * 32 * 32 * 4, 32 * 32 * 32 * 4),
              layer("max_pool", 2e-6, 0, 32 * 32 * 32 * 4, 32 * 16 * 16 * 4),
              layer("conv2d 32->64", 6e-5, 18496, 32 * 16 * 16 * 4, 64 * 16 * 16 * 4),
              layer("max_pool", 1e-6, 0, 64 * 16 * 16 * 4, 64 * 8 * 8 * 4),
              layer("flatten", 1e-7, 0, 4096 * 4, 4096 * 4),
              layer("dense 4096->64", 1e-5, 4096 * 64 + 64, 4096 * 4, 64 * 4, SplitKind::dense, 64),
              layer("dense 64->10", 1e-6, 650, 64 * 4, 10 * 4, SplitKind::dense, 10)};
  p.within_node = p.between_nodes = link;
  return p;
}

// AlexNet's shape at 224x224: 2.5 M parameters of convolutions, 58.6 M in three dense layers.
Profile alexnet_profile(const Link& within, const Link& between) {
  Profile p;
  p.model = "alexnet";
  p.batch = 32;
  p.optimizer_s_per_param = 1e-9;
  p.base_bytes = 100e6;
  p.layers = {layer("convolutions", 20e-3, 2.47e6, 3 * 224 * 224 * 4, 9216 * 4),
              layer("dense 9216->4096", 1.5e-3, 37.75e6, 9216 * 4, 4096 * 4, SplitKind::dense, 4096),
              layer("dense 4096->4096", 0.7e-3, 16.78e6, 4096 * 4, 4096 * 4, SplitKind::dense, 4096),
              layer("dense 4096->1000", 0.2e-3, 4.1e6, 4096 * 4, 1000 * 4, SplitKind::dense, 1000)};
  p.within_node = within;
  p.between_nodes = between;
  return p;
}

// Shared memory (a small collective costs MPI some 10 us) and a slow network.
const Link kFast{10e-6, 20e9}, kSlow{100e-6, 0.1e9};

// The rules that follow from a layout, each written once in core/plan/layout.hpp.
TEST(Layout, PlacesRanksAndDealsTheDataByItsGrid) {
  Layout l{2, 3, 2, 4, {3, 2, 2}, {}, 16};  // 12 ranks: world rank = (replica * S + stage) * T + t
  EXPECT_EQ(l.ranks(), 12);
  const GridPosition p = l.position(9);  // replica 1, stage 1, t 1
  EXPECT_EQ(p.replica, 1);
  EXPECT_EQ(p.stage, 1);
  EXPECT_EQ(p.t, 1);
  EXPECT_EQ(l.data_ranks(), 2);  // the group shares one batch (blocks, or nothing split)
  EXPECT_EQ(l.data_rank(p), 1);
  EXPECT_EQ(l.global_batch(), 32);
  l.split = {5};
  l.split_kind = SplitKind::dense;  // each rank of a group brings its own images
  EXPECT_EQ(l.data_ranks(), 4);
  EXPECT_EQ(l.data_rank(p), 3);
  EXPECT_EQ(l.global_batch(), 64);
  EXPECT_EQ(l.describe(), "2 x 3 x 2, 4 micro-batches, cut 3,2,2, split 5, batch 16");
}

TEST(Layout, BucketsOverlapBackwardOnlyOnPlainDataParallelism) {
  Layout data{4, 1, 1, 1, {7}, {}, 16};
  EXPECT_FALSE(data.buckets_overlap_backward());  // none asked for
  data.bucket_bytes = 1 << 20;
  EXPECT_TRUE(data.buckets_overlap_backward());
  Layout pipeline = data, split = data;
  pipeline.stages = 2;
  split.tensor = 2;
  EXPECT_FALSE(pipeline.buckets_overlap_backward());
  EXPECT_FALSE(split.buckets_overlap_backward());
}

TEST(Layout, SaysOnWhichStagesActivationsAreRecomputed) {
  Layout l{1, 3, 1, 4, {2, 2, 2}, {}, 8};
  EXPECT_EQ(l.recompute_note(), "");
  l.recompute = {1, 1, 1};
  EXPECT_EQ(l.recompute_note(), ", activations recomputed");
  l.recompute = {1, 0, 1};
  EXPECT_EQ(l.recompute_note(), ", activations recomputed on stages 0,2");
  l.recompute = {0, 1};  // stages past the vector's end recompute nothing
  EXPECT_EQ(l.recompute_note(), ", activations recomputed on stage 1");
  EXPECT_FALSE(l.recomputes(2));
}

TEST(RecomputeSegments, AboutTheRootOfTheLayersOfAboutEqualBytes) {
  EXPECT_EQ(recompute_segments({1, 1, 1, 1}), (std::vector<std::size_t>{0, 0, 1, 1}));
  // The large first output gets a segment of its own; a segment ends where the bytes so far pass its share.
  EXPECT_EQ(recompute_segments({8, 1, 1, 1, 1, 1, 1, 1, 1}), (std::vector<std::size_t>{0, 1, 1, 1, 2, 2, 2, 2, 2}));
  EXPECT_EQ(recompute_segments({5}), (std::vector<std::size_t>{0}));
}

TEST(Layout, ALayerMaySplitWhereItsKindSplitsAndTheGroupDividesIt) {
  Layout l;
  EXPECT_FALSE(l.may_split(SplitKind::dense, 64));  // T = 1: no group to split across
  l.tensor = 4;
  EXPECT_TRUE(l.may_split(SplitKind::dense, 64));
  EXPECT_FALSE(l.may_split(SplitKind::dense, 10));
  EXPECT_TRUE(l.may_split(SplitKind::block, 12));
  EXPECT_FALSE(l.may_split(SplitKind::none, 64));
  EXPECT_FALSE(l.may_split(SplitKind::dense, 0));
}

TEST(Planner, FastLinksAndASmallModelChooseDataParallelism) {
  const SearchResult r = plan_layouts(seed_cnn_profile(kFast), {4, 4}, 256, {});
  ASSERT_TRUE(r.best && r.best_data && r.fastest);
  EXPECT_EQ(r.best->layout.replicas, 4) << r.best->layout.describe();
  EXPECT_DOUBLE_EQ(r.best->prediction.step_s, r.best_data->prediction.step_s);
  std::cout << "fastest predicted: " << r.fastest->layout.describe() << ", " << r.fastest->prediction.step_s
            << " s against data parallelism's " << r.best_data->prediction.step_s << " s\n";
  EXPECT_GT(r.considered, 50u);
}

TEST(Planner, SlowLinksWithLargeDenseLayersSplitThem) {
  // Two nodes of one rank, a slow network between them: all-reducing 61 M gradients costs more than
  // exchanging a batch of features.
  const SearchResult r = plan_layouts(alexnet_profile(kFast, kSlow), {2, 1}, 64, {});
  ASSERT_TRUE(r.best && r.best_data);
  EXPECT_EQ(r.best->layout.tensor, 2) << r.best->layout.describe();
  EXPECT_FALSE(r.best->layout.split.empty());
  EXPECT_LT(r.best->prediction.sent_bytes * 5, r.best_data->prediction.sent_bytes);
  EXPECT_LT(r.best->prediction.step_s, r.best_data->prediction.step_s);
}

// Re-profiling: layers measured as predicted keep their times; a stage whose cores another job took
// scales its layers (their split collectives apart), and the plan made from it moves work off that stage.
TEST(Planner, RecalibrationScalesTheLayersMeasuredSlowerAndMovesTheCut) {
  const Profile p = alexnet_profile(kFast, kFast);
  const Layout split{1, 1, 2, 1, {4}, {1, 2, 3}, 32, SplitKind::dense};
  const Prediction predicted = predict(p, {2, 2}, split, 64);
  std::vector<double> measured;
  for (const auto& l : predicted.layers) measured.push_back(l.seconds);
  const Profile same = recalibrated(p, predicted, measured);
  for (std::size_t i = 0; i < p.layers.size(); ++i) EXPECT_NEAR(same.layers[i].seconds, p.layers[i].seconds, 1e-12);

  // The dense layers' compute measured 3x slower; their collectives as predicted.
  for (std::size_t i = 1; i < 4; ++i) measured[i] += 2 * predicted.layers[i].compute_s;
  const Profile slower = recalibrated(p, predicted, measured);
  EXPECT_NEAR(slower.layers[0].seconds, p.layers[0].seconds, 1e-12);
  for (std::size_t i = 1; i < 4; ++i) {
    EXPECT_NEAR(slower.layers[i].seconds, 3 * p.layers[i].seconds, 1e-9) << i;
    EXPECT_NEAR(slower.layers[i].fixed_seconds, 3 * p.layers[i].fixed_seconds, 1e-12) << i;
  }
  // Bounded either way.
  measured[0] = 1e6;
  measured[1] = 0;  // not measured: kept
  const Profile odd = recalibrated(p, predicted, measured);
  EXPECT_NEAR(odd.layers[0].seconds, kMaxRecalibration * p.layers[0].seconds, 1e-9);
  EXPECT_NEAR(odd.layers[1].seconds, p.layers[1].seconds, 1e-12);

  // Four equal layers on a two-stage pipeline, cut in the middle; the second stage measured 3x slower
  // than profiled (another job on its cores): the cut moves a layer off it.
  Profile equal = p;
  for (auto& l : equal.layers) {
    l.seconds = 1e-3;
    l.fixed_seconds = 0;
  }
  Constraints pipelines;
  pipelines.stages = 2;
  pipelines.tensor = 1;
  pipelines.micro_batches = 4;
  const SearchResult first = plan_layouts(equal, {2, 2}, 64, pipelines);
  ASSERT_TRUE(first.best);
  EXPECT_EQ(first.best->layout.cut, (std::vector<std::size_t>{2, 2})) << first.best->layout.describe();
  std::vector<double> stage_slow;
  for (const auto& l : first.best->prediction.layers) stage_slow.push_back(l.stage == 1 ? 3 * l.seconds : l.seconds);
  const SearchResult again = plan_layouts(recalibrated(equal, first.best->prediction, stage_slow), {2, 2}, 64, pipelines);
  ASSERT_TRUE(again.best);
  EXPECT_EQ(again.best->layout.cut, (std::vector<std::size_t>{3, 1})) << again.best->layout.describe();
}

// A step measured longer than its compute and predicted communication: the links are scaled until the
// current layout's prediction takes the measured step, and a layout that sends less can then win.
TEST(Planner, LinksAreCalibratedToTheMeasuredStep) {
  const Profile p = alexnet_profile(kSlow, kSlow);
  const Layout data{2, 1, 1, 1, {4}, {}, 32};
  const Prediction before = predict(p, {2, 1}, data, 64);
  ASSERT_GT(before.comm_s, 0.0);
  const double measured = before.step_s + 2 * before.comm_s;  // communication took 3x its prediction
  const Profile calibrated = with_links_calibrated(p, before, measured);
  const Prediction after = predict(calibrated, {2, 1}, data, 64);
  EXPECT_NEAR(after.step_s, measured, 1e-9);
  EXPECT_NEAR(calibrated.between_nodes.bytes_per_s, p.between_nodes.bytes_per_s / 3, 1e-3);
  // Stage 3's gathers' cost beyond the links is communication too: scaled alike.
  Profile gathering = p;
  gathering.gather_extra_s = 1e-3;
  EXPECT_NEAR(with_links_calibrated(gathering, before, measured).gather_extra_s, 3e-3, 1e-12);
  // Measured as predicted, or faster (steps timed before a link slowed down): unchanged; nothing to
  // communicate: unchanged.
  EXPECT_EQ(with_links_calibrated(p, before, 0.5 * before.step_s).between_nodes.bytes_per_s, p.between_nodes.bytes_per_s);
  EXPECT_NEAR(with_links_calibrated(p, before, before.step_s).between_nodes.latency_s, p.between_nodes.latency_s, 1e-15);
  const Layout alone{1, 1, 1, 1, {4}, {}, 64};
  const Prediction one = predict(p, {1, 1}, alone, 64);
  EXPECT_EQ(with_links_calibrated(p, one, 10 * one.step_s).between_nodes.bytes_per_s, p.between_nodes.bytes_per_s);
}

// What the user chose and the planner keeps: GPipe holds every micro-batch's activations where 1F1B holds
// at most one a stage ahead; buckets hide the all-reduce under the last micro-batch's backward, all but
// the last bucket's.
TEST(Planner, GPipesActivationsAndBucketsOverlapAreCosted) {
  const Profile p = alexnet_profile(kFast, kSlow);
  Layout one_f_one_b{1, 2, 1, 8, {2, 2}, {}, 64};
  Layout gpipe = one_f_one_b;
  gpipe.schedule = PipelineSchedule::gpipe;
  const Prediction a = predict(p, {2, 2}, one_f_one_b, 64), b = predict(p, {2, 2}, gpipe, 64);
  EXPECT_NEAR(a.step_s, b.step_s, 0.01 * a.step_s) << "the same work in another order";
  EXPECT_GT(b.peak_bytes, a.peak_bytes);
  // Stage 0 keeps 8 micro-batches of 8 images instead of 2: 6 x 8 more images' outputs of each layer.
  EXPECT_NEAR(b.layers[0].memory_bytes - a.layers[0].memory_bytes, 6 * 8 * p.layers[0].output_bytes, 1.0);
  EXPECT_NE(gpipe.describe().find(", gpipe"), std::string::npos);

  // Data parallelism over the slow network: 61 M gradients take far longer than backward, so buckets hide
  // backward's time of it and no more; with a fast network they hide all but the last bucket's.
  Layout plain{2, 1, 1, 1, {4}, {}, 32};
  Layout buckets = plain;
  buckets.bucket_bytes = 25 << 20;
  const Profile two_nodes = alexnet_profile(kSlow, kSlow);
  const Prediction slow_plain = predict(two_nodes, {2, 1}, plain, 64);
  const Prediction slow_buckets = predict(two_nodes, {2, 1}, buckets, 64);
  EXPECT_NEAR(slow_plain.step_s - slow_buckets.step_s, 2.0 / 3.0 * slow_plain.compute_s, 1e-9);
  // Micro-batches: only the last one's backward hides the buckets.
  Layout plain4 = plain, buckets4 = buckets;
  plain4.micro_batches = buckets4.micro_batches = 4;
  const Prediction slow_plain4 = predict(two_nodes, {2, 1}, plain4, 64);
  EXPECT_NEAR(slow_plain4.step_s - predict(two_nodes, {2, 1}, buckets4, 64).step_s,
              2.0 / 3.0 * slow_plain4.compute_s / 4, 1e-9);
  const Profile fast = alexnet_profile(kFast, kFast);
  const Prediction fast_buckets = predict(fast, {2, 1}, buckets, 64);
  const double last_bucket = 2 * kFast.latency_s + (25 << 20) / kFast.bytes_per_s;  // 2 ranks: 2 (n-1)/n = 1
  EXPECT_NEAR(fast_buckets.comm_s, last_bucket, 1e-12);
}

TEST(Planner, AMemoryLimitBelowDataParallelismsNeedChoosesAPipelineOrASplit) {
  const Profile p = alexnet_profile(kFast, kFast);
  const SearchResult free = plan_layouts(p, {2, 2}, 64, {});
  ASSERT_TRUE(free.best_data);
  Constraints limits;
  limits.memory_limit_bytes = 0.75 * free.best_data->prediction.peak_bytes;
  const SearchResult tight = plan_layouts(p, {2, 2}, 64, limits);
  EXPECT_FALSE(tight.best_data) << "data parallelism needs " << free.best_data->prediction.peak_bytes;
  ASSERT_TRUE(tight.best);
  EXPECT_TRUE(tight.best->layout.stages > 1 || tight.best->layout.tensor > 1) << tight.best->layout.describe();
  EXPECT_LE(tight.best->prediction.peak_bytes, limits.memory_limit_bytes);
  EXPECT_GT(tight.over_memory, 0u);
}

// VGG16's shape at 224x224 with Adam: the convolutions' compute, the classifier's 124 M parameters.
Profile vgg16_profile() {
  Profile p;
  p.model = "vgg16";
  p.batch = 8;
  p.optimizer_s_per_param = 1e-10;
  p.optimizer_floats = 2;
  p.base_bytes = 100e6;
  p.layers = {layer("convolutions", 0.2, 14.7e6, 3 * 224 * 224 * 4, 25088 * 4),
              layer("dense 25088->4096", 4e-3, 102.8e6, 25088 * 4, 4096 * 4),
              layer("dense 4096->4096", 1e-3, 16.8e6, 4096 * 4, 4096 * 4),
              layer("dense 4096->1000", 0.3e-3, 4.1e6, 4096 * 4, 1000 * 4)};
  p.within_node = p.between_nodes = kFast;
  return p;
}

TEST(Planner, ShardedStateHoldsAReplicasShareOfTheOptimizersStateAndSendsTheAllReducesBytes) {
  const Profile p = vgg16_profile();
  Layout whole{4, 1, 1, 1, {4}, {}, 8};
  Layout sharded = whole;
  sharded.shard_state = 1;
  const Prediction a = predict(p, {4, 4}, whole, 32), b = predict(p, {4, 4}, sharded, 32);
  double params = 0;
  for (const auto& l : p.layers) params += l.params;
  EXPECT_NEAR(a.peak_bytes - b.peak_bytes, 4.0 * params * p.optimizer_floats * 3 / 4, 1.0);
  EXPECT_NEAR(a.reduce_s - b.reduce_s, params * p.optimizer_s_per_param * 3 / 4, 1e-12);
  EXPECT_DOUBLE_EQ(a.sent_bytes, b.sent_bytes);
  EXPECT_EQ(sharded.describe(), "4 x 1 x 1, 1 micro-batch, batch 8, optimizer state sharded");
}

// VGG16's parameters spread over eight dense layers of 15.5 M each instead of one of 103 M and two smaller.
Profile spread_profile() {
  Profile p = vgg16_profile();
  p.model = "spread";
  p.layers.resize(1);
  for (int i = 0; i < 8; ++i) p.layers.push_back(layer("dense " + std::to_string(i), 1e-3, 15.5e6, 4096 * 4, 4096 * 4));
  return p;
}

TEST(Planner, ShardedGradientsHoldAReplicasShareTheBucketInFlightAndTheLargestLayersWhole) {
  // Stage 2 keeps 1/D of the reduced gradients beside stage 1's share of the state, a bucket being reduced
  // and one filling, each with up to the largest layer's whole gradient, which one call writes; the bytes a
  // step are the all-reduce's. With micro-batches it keeps the whole gradient, as stage 1 does. In a
  // pipeline the stages' reduce-scatters, run in their last backwards, add up.
  const Profile p = spread_profile();
  Layout first{4, 1, 1, 1, {9}, {}, 8};
  first.shard_state = 1;
  Layout second = first;
  second.shard_state = 2;
  const Prediction a = predict(p, {4, 4}, first, 32), b = predict(p, {4, 4}, second, 32);
  double params = 0;
  for (const auto& l : p.layers) params += l.params;
  EXPECT_NEAR(a.peak_bytes - b.peak_bytes, 4.0 * params * 3 / 4 - 2 * (Layout::kShardedBucketBytes + 4 * 15.5e6), 1.0);
  EXPECT_DOUBLE_EQ(a.sent_bytes, b.sent_bytes);
  Layout micro = second;
  micro.micro_batches = 2;
  Layout micro_first = micro;
  micro_first.shard_state = 1;
  EXPECT_DOUBLE_EQ(predict(p, {4, 4}, micro, 32).peak_bytes, predict(p, {4, 4}, micro_first, 32).peak_bytes);
  // Two stages of equal parameters on 2 replicas each: stage 2 adds both stages' reduce-scatter halves to
  // the step, where stage 1 all-reduces each stage's gradients after the pipeline, side by side.
  Layout piped{2, 2, 1, 1, {5, 4}, {}, 16};
  piped.shard_state = 1;
  const Prediction c = predict(p, {4, 4}, piped, 32);
  piped.shard_state = 2;
  EXPECT_GT(predict(p, {4, 4}, piped, 32).step_s, c.step_s);
  EXPECT_EQ(second.describe(), "4 x 1 x 1, 1 micro-batch, batch 8, optimizer state and gradients sharded");
  second.bucket_bytes = 4e6;  // --bucket-mb sets stage 2's buckets
  EXPECT_NEAR(predict(p, {4, 4}, second, 32).peak_bytes - b.peak_bytes, 2 * (4e6 - Layout::kShardedBucketBytes), 1.0);
  // VGG16's first dense layer holds 74% of its parameters: on 4 replicas stage 2 saves nothing over stage 1.
  const Profile vgg16 = vgg16_profile();
  first.cut = second.cut = {4};
  second.bucket_bytes = 0;
  EXPECT_DOUBLE_EQ(predict(vgg16, {4, 4}, second, 32).peak_bytes, predict(vgg16, {4, 4}, first, 32).peak_bytes);

  // A memory limit between stage 1's peak and stage 2's chooses stage 2; one above stage 1's, stage 1 (each
  // stage weighs the margin). One micro-batch: else halving the activations would do as well.
  Constraints limits;
  limits.tensor = 1;
  limits.micro_batches = 1;
  limits.shard_states = {0, 1, 2};
  limits.memory_limit_bytes = (a.peak_bytes + b.peak_bytes) / 2;
  const SearchResult tight = plan_layouts(p, {4, 4}, 32, limits);
  ASSERT_TRUE(tight.best);
  EXPECT_TRUE(tight.best->layout.plain_data_parallel()) << tight.best->layout.describe();
  EXPECT_TRUE(tight.best->layout.shards_gradients()) << tight.best->layout.describe();
  limits.memory_limit_bytes = a.peak_bytes + 1e6;
  const SearchResult roomier = plan_layouts(p, {4, 4}, 32, limits);
  ASSERT_TRUE(roomier.best);
  EXPECT_EQ(roomier.best->layout.shard_state, 1) << roomier.best->layout.describe();
}

TEST(Planner, ShardedParametersHoldAReplicasShareAndTwoLayersWholeForHalfAnAllReduceMore) {
  // Stage 3 keeps 1/D of the parameters' values beside stage 2's shares, and whole the layer running and the
  // one gathered ahead; it gathers every layer in forward and backward instead of all-gathering after the
  // update: half an all-reduce's bytes more a step, and (not measured to overlap compute) more time.
  const Profile p = spread_profile();
  Layout second{4, 1, 1, 1, {9}, {}, 8};
  second.shard_state = 2;
  Layout third = second;
  third.shard_state = 3;
  const Prediction b = predict(p, {4, 4}, second, 32), c = predict(p, {4, 4}, third, 32);
  double params = 0;
  for (const auto& l : p.layers) params += l.params;
  EXPECT_NEAR(b.peak_bytes - c.peak_bytes, 4.0 * params * 3 / 4 - 2 * 4 * 15.5e6, 1.0);
  EXPECT_NEAR(c.sent_bytes - b.sent_bytes, 4.0 * params * 3 / 4, 1.0);
  EXPECT_GT(c.step_s, b.step_s);  // the gathers counted in full
  // Each gather pays what the probe measured beyond the ring's steps: in forward and backward, each layer
  // with parameters.
  double layers_with_params = 0;
  for (const auto& l : p.layers) layers_with_params += l.params > 0;
  Profile slower = p;
  slower.gather_extra_s = 1e-3;
  EXPECT_NEAR(predict(slower, {4, 4}, third, 32).step_s - c.step_s, 2 * layers_with_params * 1e-3, 1e-9);
  EXPECT_DOUBLE_EQ(predict(slower, {4, 4}, second, 32).step_s, b.step_s);  // no gathers, nothing added
  EXPECT_EQ(third.describe(), "4 x 1 x 1, 1 micro-batch, batch 8, optimizer state, gradients and parameters sharded");
  // In a pipeline each stage gathers on its own thread: every micro-batch's slot grows.
  Layout piped{2, 2, 1, 1, {5, 4}, {}, 16};
  piped.shard_state = 2;
  const Prediction d = predict(p, {4, 4}, piped, 32);
  piped.shard_state = 3;
  EXPECT_GT(predict(p, {4, 4}, piped, 32).compute_s, d.compute_s);
  // A memory limit between stage 2's peak and stage 3's chooses stage 3.
  Constraints limits;
  limits.tensor = 1;
  limits.micro_batches = 1;
  limits.shard_states = {0, 1, 2, 3};
  limits.memory_limit_bytes = (b.peak_bytes + c.peak_bytes) / 2;
  const SearchResult tight = plan_layouts(p, {4, 4}, 32, limits);
  ASSERT_TRUE(tight.best);
  EXPECT_TRUE(tight.best->layout.plain_data_parallel()) << tight.best->layout.describe();
  EXPECT_EQ(tight.best->layout.shard_state, 3) << tight.best->layout.describe();
}

TEST(Planner, TheAllReducesBuffersAreThoseOfItsAlgorithm) {
  // Measured (docs/performance.md): shared-memory windows hold 2 floats a parameter and a rank touches
  // the others' slices; a ring a piece of 1/D. A sharded state goes through the ring's halves.
  const Profile p = vgg16_profile();
  double params = 0;
  for (const auto& l : p.layers) params += l.params;
  const Layout data{4, 1, 1, 1, {4}, {}, 8};
  const Cluster ring{4, 4, false}, windows{4, 4, true}, one_a_node{4, 1, true};
  const double on_a_ring = predict(p, ring, data, 32).peak_bytes;
  EXPECT_NEAR(predict(p, windows, data, 32).peak_bytes - on_a_ring, 4 * params * (2 + 0.8 * 3 / 4 - 0.35), 1.0);
  EXPECT_DOUBLE_EQ(predict(p, one_a_node, data, 32).peak_bytes, on_a_ring);  // no node to share
  Layout sharded = data;
  sharded.shard_state = 1;
  EXPECT_DOUBLE_EQ(predict(p, windows, sharded, 32).peak_bytes, predict(p, ring, sharded, 32).peak_bytes);
}

TEST(Planner, AMemoryLimitBelowDataParallelismsChoosesShardedStateWhereItIsCheaperThanAPipeline) {
  const Profile p = vgg16_profile();
  Constraints limits;
  limits.tensor = 1;
  limits.shard_states = {0, 1};
  const SearchResult free = plan_layouts(p, {4, 4}, 32, limits);
  ASSERT_TRUE(free.best);
  // With room, the state stays whole: sharding saves a little optimizer time, less than the margin.
  EXPECT_TRUE(free.best->layout.plain_data_parallel()) << free.best->layout.describe();
  EXPECT_FALSE(free.best->layout.shards_optimizer_state()) << free.best->layout.describe();
  Layout sharded = free.best->layout;
  sharded.shard_state = 1;
  const double sharded_peak = predict(p, {4, 4}, sharded, 32).peak_bytes;
  limits.memory_limit_bytes = (sharded_peak + free.best->prediction.peak_bytes) / 2;
  const SearchResult tight = plan_layouts(p, {4, 4}, 32, limits);
  ASSERT_TRUE(tight.best);
  EXPECT_TRUE(tight.best->layout.plain_data_parallel()) << tight.best->layout.describe();
  EXPECT_TRUE(tight.best->layout.shards_optimizer_state()) << tight.best->layout.describe();
  // Without sharding the same limit takes a pipeline, which is slower: the convolutions sit on one stage.
  limits.shard_states = {0};
  const SearchResult unsharded = plan_layouts(p, {4, 4}, 32, limits);
  ASSERT_TRUE(unsharded.best);
  EXPECT_GT(unsharded.best->layout.stages, 1) << unsharded.best->layout.describe();
  EXPECT_GT(unsharded.best->prediction.step_s, tight.best->prediction.step_s);
}

TEST(Planner, SplitLayersReplicasShardTheirStateAndAverageTheWholeLayersInTheShardOnly) {
  const Profile p = alexnet_profile(kFast, kFast);
  Constraints limits;
  limits.stages = 1;
  limits.tensor = 2;  // 2 replicas of the classifier split in two, on 4 ranks
  limits.shard_states = {0, 1};
  const SearchResult free = plan_layouts(p, {4, 4}, 32, limits);
  ASSERT_TRUE(free.best);
  ASSERT_EQ(free.best->layout.tensor, 2) << free.best->layout.describe();
  Layout kept = free.best->layout, sharded = free.best->layout;
  kept.shard_state = 0;
  sharded.shard_state = 1;
  const Prediction whole = predict(p, {4, 4}, kept, 32), shard = predict(p, {4, 4}, sharded, 32);
  EXPECT_LT(shard.peak_bytes, whole.peak_bytes);
  // The convolutions' gradients go over the split group in the replica's shard only. Here a shard (half of a
  // rank's 31.8 M parameters) holds all 2.5 M on one replica, which the step waits for; with convolutions of
  // 50 M, a shard's worth of them.
  EXPECT_DOUBLE_EQ(shard.sent_bytes, whole.sent_bytes);
  ASSERT_EQ(kept.split, (std::vector<std::size_t>{1, 2, 3})) << kept.describe();
  Profile wide = p;
  wide.layers[0].params = 50e6;
  const double rank_params = 50e6 + (37.75e6 + 16.78e6 + 4.1e6) / 2;
  // A group of 2 sends as many bytes as it all-reduces.
  EXPECT_NEAR(predict(wide, {4, 4}, kept, 32).sent_bytes - predict(wide, {4, 4}, sharded, 32).sent_bytes,
              4 * (50e6 - rank_params / 2), 1.0);
  limits.memory_limit_bytes = (shard.peak_bytes + whole.peak_bytes) / 2;
  const SearchResult tight = plan_layouts(p, {4, 4}, 32, limits);
  ASSERT_TRUE(tight.best);
  EXPECT_EQ(tight.best->layout.tensor, 2) << tight.best->layout.describe();
  EXPECT_TRUE(tight.best->layout.shards_optimizer_state()) << tight.best->layout.describe();
}

// A CNN whose activations, not its parameters, fill the memory.
Profile wide_cnn_profile() {
  Profile p;
  p.model = "wide_cnn";
  p.batch = 16;
  p.optimizer_s_per_param = 1e-9;
  p.base_bytes = 50e6;
  const double map = 64 * 112 * 112 * 4;
  for (int i = 0; i < 8; ++i) p.layers.push_back(layer("conv " + std::to_string(i), 4e-3, 37e3, map, map));
  p.layers.push_back(layer("global pool", 1e-5, 0, map, 64 * 4));
  p.layers.push_back(layer("dense 64->10", 1e-6, 650, 64 * 4, 10 * 4));
  p.within_node = p.between_nodes = kFast;
  return p;
}

TEST(Planner, RecomputationKeepsASegmentsInputAndCostsItsForwardAgain) {
  const Profile p = wide_cnn_profile();
  Layout kept{1, 1, 1, 1, {10}, {}, 16};
  Layout recomputed = kept;
  recomputed.recompute = {1};
  const Prediction a = predict(p, {1, 1}, kept, 16), b = predict(p, {1, 1}, recomputed, 16);
  // recompute_segments cuts the 10 layers into 4 segments of about equal bytes: [0, 2], [3, 4], [5, 6],
  // [7, 9]. Stored, the peak is layer 7's backward: the input, 8 maps kept, the gradients of its output
  // and input (11 maps). Recomputed, the input and the outputs of layers 2, 4 and 6 are kept (the next
  // segments' inputs); layer 7's backward holds those, its output and the two gradients (7 maps), as does
  // layer 6's, with segment [5, 6] computed again; the others less.
  const double map = p.layers[0].output_bytes;
  EXPECT_NEAR(a.peak_bytes - b.peak_bytes, 16 * (11 * map - 7 * map), 1.0);
  // The first three segments' 7 layers run their forward (a third of their time) again.
  EXPECT_NEAR(b.step_s - a.step_s, 7 * 16 * 4e-3 / 3, 1e-9);
  EXPECT_EQ(recomputed.describe(), "1 x 1 x 1, 1 micro-batch, batch 16, activations recomputed");
}

TEST(Planner, RecomputesOnlyTheStagesThatWouldNotFit) {
  // Two stages, four micro-batches: 1F1B keeps two in flight on stage 0, one on stage 1.
  const Profile p = wide_cnn_profile();
  Constraints limits;
  limits.stages = 2;
  limits.micro_batches = 4;
  limits.may_recompute = true;
  const SearchResult free = plan_layouts(p, {2, 2}, 32, limits);
  ASSERT_TRUE(free.best);
  EXPECT_FALSE(free.best->layout.recomputes_any()) << free.best->layout.describe();
  const auto& peaks = free.best->prediction.stage_peak_bytes;
  ASSERT_EQ(peaks.size(), 2u);
  limits.memory_limit_bytes = 0.9 * peaks[0];
  ASSERT_LT(peaks[1], limits.memory_limit_bytes);
  // The cut that fitted without a limit is weighed with stage 0 alone recomputing, which fits, and is
  // faster than recomputing both stages.
  std::optional<Plan> stage_0, both;
  for_each_layout(p, {2, 2}, 32, limits, [&](const Plan& plan) {
    if (plan.layout.cut != free.best->layout.cut) return;
    if (plan.layout.recompute == std::vector<char>{1, 0}) stage_0 = plan;
    if (plan.layout.recompute == std::vector<char>{1, 1}) both = plan;
  });
  ASSERT_TRUE(stage_0 && both);
  EXPECT_LE(stage_0->prediction.peak_bytes, limits.memory_limit_bytes);
  EXPECT_EQ(stage_0->layout.recompute_note(), ", activations recomputed on stage 0");
  EXPECT_LT(stage_0->prediction.step_s, both->prediction.step_s);
  const SearchResult tight = plan_layouts(p, {2, 2}, 32, limits);
  ASSERT_TRUE(tight.best);
  // Below every layout's need with activations kept, the choice recomputes.
  double least_kept = 1e300;
  for_each_layout(p, {2, 2}, 32, {.stages = 2, .micro_batches = 4}, [&](const Plan& plan) {
    least_kept = std::min(least_kept, plan.prediction.peak_bytes);
  });
  limits.memory_limit_bytes = 0.9 * least_kept;
  const SearchResult tighter = plan_layouts(p, {2, 2}, 32, limits);
  ASSERT_TRUE(tighter.best);
  EXPECT_TRUE(tighter.best->layout.recomputes_any()) << tighter.best->layout.describe();
}

// Every layout of a small case, enumerated here without the search's shortcuts: every grid, every
// micro-batch count, every cut, every subset of the splittable layers.
double fastest_by_enumeration(const Profile& p, const Cluster& c, int global_batch) {
  const std::size_t L = p.layers.size();
  double best = 1e300;
  std::function<void(std::vector<std::size_t>&, std::size_t, int, const Layout&)> cuts =
      [&](std::vector<std::size_t>& counts, std::size_t left, int stages, const Layout& base) {
        if (stages == 0) {
          if (left != 0) return;
          Layout l = base;
          l.cut = counts;
          try {
            best = std::min(best, predict(p, c, l, global_batch).step_s);
          } catch (const InputError&) {  // a batch that does not divide
          }
          return;
        }
        for (std::size_t k = 1; k <= left; ++k) {
          counts.push_back(k);
          cuts(counts, left - k, stages - 1, base);
          counts.pop_back();
        }
      };
  for (int T = 1; T <= c.ranks; ++T)
    for (int S = 1; S * T <= c.ranks; ++S) {
      if (c.ranks % (S * T) != 0 || static_cast<std::size_t>(S) > L) continue;
      const int D = c.ranks / (S * T);
      for (std::size_t mask = 0; mask < (std::size_t{1} << L); ++mask) {
        std::vector<std::size_t> split;
        bool possible = (mask == 0) == (T == 1);
        for (std::size_t i = 0; i < L; ++i)
          if (mask & (std::size_t{1} << i)) {
            split.push_back(i);
            possible = possible && p.layers[i].split != SplitKind::none && p.layers[i].divisor % T == 0;
          }
        if (!possible) continue;
        for (int M : {1, 2, 4, 8, 16, 32}) {
          Layout layout{D, S, T, M, {}, split, 0, split.empty() ? SplitKind::none : p.layers[split.front()].split};
          const int data_ranks = layout.data_ranks();
          if (global_batch % data_ranks != 0 || (global_batch / data_ranks) % M != 0) continue;
          layout.batch = global_batch / data_ranks;
          std::vector<std::size_t> counts;
          cuts(counts, L, S, layout);
        }
      }
    }
  return best;
}

TEST(Planner, ItsChoiceIsTheFastestOfAnExhaustiveEnumeration) {
  for (const Cluster c : {Cluster{4, 4}, Cluster{4, 2}, Cluster{6, 3}}) {
    for (const Profile& p : {seed_cnn_profile(kSlow), alexnet_profile(kFast, kSlow)}) {
      const SearchResult r = plan_layouts(p, c, 96, {});
      ASSERT_TRUE(r.fastest && r.best);
      EXPECT_DOUBLE_EQ(r.fastest->prediction.step_s, fastest_by_enumeration(p, c, 96))
          << p.model << " on " << c.ranks << " ranks: " << r.fastest->layout.describe();
      // The choice: the fastest, or data parallelism within 3% of it.
      EXPECT_LE(r.best->prediction.step_s, (1 + kDataParallelMargin) * r.fastest->prediction.step_s);
    }
  }
}

// The two dense layers share a weight (kept together): no layout the planner weighs cuts between them, and a
// pipeline of as many stages as layers is not weighed at all.
TEST(Planner, NeverCutsBetweenLayersThatShareAWeight) {
  Profile p = seed_cnn_profile(kSlow);
  p.layers[6].kept_with_previous = 1;
  std::size_t pipelines = 0;
  for_each_layout(p, Cluster{4, 4}, 96, {}, [&](const Plan& plan) {
    std::size_t start = 0;
    for (const std::size_t count : plan.layout.cut) {
      EXPECT_NE(start, 6u) << plan.layout.describe();
      start += count;
    }
    pipelines += plan.layout.stages > 1;
  });
  EXPECT_GT(pipelines, 0u);
  EXPECT_EQ(profile_from_text(to_text(p), "test").layers[6].kept_with_previous, 1.0);
}

// Side values crossing a cut (a skip connection opened into the chain) go in the stage's message beside the
// layer's output: the pipeline sends their bytes too, each micro-batch forward and back.
TEST(Planner, ACutSendsTheSideValuesCrossingIt) {
  Profile p = seed_cnn_profile(kSlow);
  Layout layout;
  layout.stages = 2;
  layout.cut = {2, 5};
  layout.batch = 32;
  const double without = predict(p, Cluster{2, 2}, layout, 32).sent_bytes;
  p.layers[1].side_bytes = 1000;
  EXPECT_DOUBLE_EQ(predict(p, Cluster{2, 2}, layout, 32).sent_bytes, without + 2 * 32 * 1000.0);
  p.layers[1].side_bytes = 0;
  p.layers[2].side_bytes = 1000;  // not at the cut
  EXPECT_DOUBLE_EQ(predict(p, Cluster{2, 2}, layout, 32).sent_bytes, without);
}

TEST(Planner, PredictsTheBytesDdlTrainReportsForASplitClassifier) {
  // DdlTrain.SplitLayersReportTheBytesTheySend: seed_cnn, T = 2, batch 16 a rank, 614,848 bytes a step,
  // of which 64 are the labels, which the planner leaves out.
  const Profile p = seed_cnn_profile(kFast);
  const Layout split{1, 1, 2, 1, {7}, {5, 6}, 16, SplitKind::dense};
  EXPECT_DOUBLE_EQ(predict(p, {2, 2}, split, 32).sent_bytes, 614848.0 - 64.0);
  // Data parallelism on 2 ranks sends each rank's 282,250 gradients once (2 (n - 1) / n of them).
  const Layout data{2, 1, 1, 1, {7}, {}, 16};
  EXPECT_DOUBLE_EQ(predict(p, {2, 2}, data, 32).sent_bytes, 282250.0 * 4);
}

TEST(Planner, RefusesLayoutsThatDoNotFit) {
  const Profile p = seed_cnn_profile(kFast);
  EXPECT_THROW(predict(p, {2, 2}, Layout{1, 1, 2, 1, {7}, {4}, 16, SplitKind::dense}, 32), InputError);    // flatten splits not
  EXPECT_THROW(predict(p, {4, 4}, Layout{1, 1, 4, 1, {7}, {5, 6}, 8, SplitKind::dense}, 32), InputError);  // 4 does not divide 10
  EXPECT_THROW(predict(p, {2, 2}, Layout{1, 2, 1, 1, {3, 3}, {}, 32}, 32), InputError);  // the cut misses a layer
  EXPECT_THROW(predict(p, {4, 4}, Layout{2, 1, 1, 1, {7}, {}, 16}, 32), InputError);     // 2 of 4 ranks
  EXPECT_THROW(predict(p, {3, 3}, Layout{3, 1, 1, 1, {7}, {}, 10}, 32), InputError);     // 32 images on 3 ranks
}

// ViT-B/16's shape: an embedding, 24 residual blocks (12 attention, 12 MLP; 12 heads), a head.
Profile vit_b16_profile() {
  Profile p;
  p.model = "vit_b16";
  p.batch = 32;
  p.optimizer_s_per_param = 1e-9;
  p.base_bytes = 200e6;
  const double tokens = 197 * 768 * 4;
  p.layers.push_back(layer("patch embedding", 2e-3, 0.74e6, 3 * 224 * 224 * 4, tokens));
  for (int b = 0; b < 12; ++b) {
    p.layers.push_back(layer("attention", 6e-3, 2.36e6, tokens, tokens, SplitKind::block, 12));
    p.layers.push_back(layer("mlp", 9e-3, 4.72e6, tokens, tokens, SplitKind::block, 12));
  }
  p.layers.push_back(layer("layer_norm", 1e-4, 1536, tokens, tokens));
  p.layers.push_back(layer("take class token", 1e-6, 0, tokens, 768 * 4));
  p.layers.push_back(layer("linear 768->100", 1e-5, 76900, 768 * 4, 100 * 4));
  p.within_node = kFast;
  p.between_nodes = {20e-6, 10e9};
  return p;
}

TEST(Planner, TheMeasuredMemoryScalesTheActivationsNotTheParameters) {
  // What the formula misses (a block's inner activations) grows with the images, not the parameters: a
  // measured figure above the formula's scales the activations alone, so the profiled layout predicts the
  // measured figure and sharding saves exactly the optimizer state's bytes.
  Profile p = vit_b16_profile();
  double params = 0;
  for (const auto& l : p.layers) params += l.params;
  const double params_formula = 4 * params * (3 + p.optimizer_floats);  // value, gradient, blocked copy, state
  const Layout one{1, 1, 1, 1, {static_cast<std::size_t>(p.layers.size())}, {}, 32};
  const double activations = predict(p, {1, 1}, one, 32).peak_bytes - p.base_bytes - params_formula;
  ASSERT_GT(activations, 0);
  p.measured_bytes = params_formula + 3 * activations;
  EXPECT_NEAR(predict(p, {1, 1}, one, 32).peak_bytes, p.base_bytes + p.measured_bytes, 1.0);
  Layout data{4, 1, 1, 1, one.cut, {}, 8};
  const double plain = predict(p, {4, 4}, data, 32).peak_bytes;
  data.shard_state = 1;
  EXPECT_NEAR(plain - predict(p, {4, 4}, data, 32).peak_bytes, 4 * params * p.optimizer_floats * 3 / 4, 1.0);
  // A split block keeps its output whole, and half its inner activations (3 times the output here, with it)
  // whole, half in the group's share.
  Layout split{1, 1, 2, 1, one.cut, {}, 32, SplitKind::block};
  for (std::size_t i = 1; i <= 24; ++i) split.split.push_back(i);
  const Prediction halves = predict(p, {2, 2}, split, 32);
  p.measured_bytes = 0;
  const Prediction unscaled = predict(p, {2, 2}, split, 32);
  // Scaled by 2.5, not 3, in the blocks (the images and the unsplit layers by 3).
  EXPECT_GT(halves.peak_bytes - unscaled.peak_bytes, 1.4 * activations);
  EXPECT_LT(halves.peak_bytes - unscaled.peak_bytes, 1.9 * activations);
}

TEST(Planner, ASplitLayerDividesOnlyWhatDoesNotStayWholeOnEveryRank) {
  // ViT-B/16's blocks split across pairs: with a quarter of each block's time whole (its LayerNorms and
  // residual additions, as the probe measures them split), each rank computes 1/4 + 3/4 / 2 of a block.
  Profile p = vit_b16_profile();
  Layout split{1, 1, 2, 1, {static_cast<std::size_t>(p.layers.size())}, {}, 32, SplitKind::block};
  for (std::size_t i = 1; i <= 24; ++i) split.split.push_back(i);
  const Prediction divided = predict(p, {2, 2}, split, 32);
  EXPECT_NEAR(divided.layers[1].compute_s, 32 * 6e-3 / 2, 1e-12);
  for (std::size_t i = 1; i <= 24; ++i) p.layers[i].whole_share = 0.25;
  p.layers[0].whole_share = 0.5;  // a layer not split computes all of its images whatever its share
  const Prediction partly = predict(p, {2, 2}, split, 32);
  EXPECT_NEAR(partly.layers[1].compute_s, 32 * 6e-3 * 0.625, 1e-12);
  EXPECT_NEAR(partly.layers[2].compute_s, 32 * 9e-3 * 0.625, 1e-12);
  EXPECT_DOUBLE_EQ(partly.layers[0].compute_s, divided.layers[0].compute_s);
  EXPECT_NEAR(partly.step_s - divided.step_s, 12 * 32 * (6e-3 + 9e-3) * 0.125, 1e-9);
  // A call of one image split: the one-image call's time shared alike (the fixed cost, 0 here, whole).
  p.layers[1].one_image_seconds = 10e-3;
  Layout one_image = split;
  one_image.batch = 1;
  EXPECT_NEAR(predict(p, {2, 2}, one_image, 1).layers[1].compute_s, 10e-3 * 0.625, 1e-12);
  // Across four, 1/4 + 3/4 / 4 of it.
  Layout fours = split;
  fours.tensor = 4;
  EXPECT_NEAR(predict(p, {4, 4}, fours, 32).layers[1].compute_s, 32 * 6e-3 * 0.4375, 1e-12);
  // The probe's figure: a block's call of 32 images split in two took 0.625 of its whole time, plus the
  // fixed cost; a split dense layer's, on the group's 64 gathered images, 0.625 of 64 images' time.
  LayerCost block = p.layers[1];
  block.fixed_seconds = 1e-3;
  EXPECT_NEAR(whole_share_of(block, 32, 1e-3 + 0.625 * 32 * 6e-3), 0.25, 1e-12);
  EXPECT_NEAR(whole_share_of(block, 64, 1e-3 + 0.625 * 64 * 6e-3), 0.25, 1e-12);
  EXPECT_NEAR(whole_share_of(block, 32, 1e-3 + 0.5 * 32 * 6e-3), 0, 1e-12) << "all of it divided";
  EXPECT_NEAR(whole_share_of(block, 32, 1e-3 + 0.45 * 32 * 6e-3), -0.1, 1e-12) << "clamped after averaging";
  EXPECT_EQ(whole_share_of(LayerCost{}, 32, 1e-3), 0) << "no time to share";
}

TEST(Planner, SplitsAllTheBlocksTheGroupDividesOrNoneAndAnyDenseLayerItDivides) {
  const Profile vit = vit_b16_profile();
  Layout group;
  group.tensor = 4;
  const SplittableLayers fours = splittable_layers(vit, group);
  EXPECT_EQ(fours.blocks.size(), 24u);
  EXPECT_EQ(fours.blocks.front(), 1u);
  EXPECT_TRUE(fours.dense.empty());
  group.tensor = 8;  // 12 heads do not split 8 ways
  EXPECT_TRUE(splittable_layers(vit, group).blocks.empty());
  group.tensor = 2;
  const SplittableLayers pairs = splittable_layers(seed_cnn_profile(kFast), group);
  EXPECT_EQ(pairs.dense, (std::vector<std::size_t>{5, 6}));
  EXPECT_TRUE(pairs.blocks.empty());
  group.tensor = 4;  // 10 outputs do not split 4 ways
  EXPECT_EQ(splittable_layers(seed_cnn_profile(kFast), group).dense, (std::vector<std::size_t>{5}));
}

TEST(Planner, AMicroBatchBelowAQuarterOfTheBatchRunsFromTheOneImageCallToTheLine) {
  // Profiled at 32 images: the line fixed + images x seconds from 8 images up (1 ms + 0.25 ms an image).
  LayerCost l = layer("attention", 0.25e-3, 0, 0, 0);
  l.fixed_seconds = 1e-3;
  EXPECT_DOUBLE_EQ(l.call_seconds(2, 32), 1.5e-3) << "not measured: the line";
  l.one_image_seconds = 3e-3;
  EXPECT_DOUBLE_EQ(l.call_seconds(1, 32), 3e-3);
  EXPECT_DOUBLE_EQ(l.call_seconds(8, 32), 3e-3) << "the line at the quarter";
  EXPECT_DOUBLE_EQ(l.call_seconds(16, 32), 5e-3);
  EXPECT_DOUBLE_EQ(l.call_seconds(4, 32), 3e-3) << "between, on the straight line from one image";
  l.one_image_seconds = 1e-3;
  EXPECT_DOUBLE_EQ(l.call_seconds(4, 32), 1e-3 + 3 * 2e-3 / 7);
  EXPECT_DOUBLE_EQ(l.call_seconds(0.5, 32), 1e-3) << "fewer than one image: one image's call";
  EXPECT_DOUBLE_EQ(l.call_seconds(1, 4), 1.25e-3) << "a quarter of one image: the line was fitted through it";
  l.scale(2);
  EXPECT_DOUBLE_EQ(l.call_seconds(1, 32), 2e-3);
  EXPECT_DOUBLE_EQ(l.call_seconds(16, 32), 10e-3);
  // A pipeline of micro-batches of one image pays for it on every layer: at least on the busiest stage's
  // 4 (the convolutions') for each of the 32, at most on the path of one micro-batch through the 7 layers
  // as well.
  Profile p = seed_cnn_profile(kFast);
  const Layout pipeline{1, 2, 1, 32, {4, 3}, {}, 32};
  const double lined = predict(p, {2, 2}, pipeline, 32).compute_s;
  for (LayerCost& c : p.layers) c.one_image_seconds = c.call_seconds(1, 32) + 1e-4;
  const double more = predict(p, {2, 2}, pipeline, 32).compute_s - lined;
  EXPECT_GE(more, 32 * 4 * 1e-4 - 1e-12);
  EXPECT_LE(more, (7 + 31 * 4) * 1e-4 + 1e-12);
}

TEST(Planner, PlansAThousandRanksFromASavedProfile) {
  const Profile saved = profile_from_text(to_text(vit_b16_profile()), "saved");
  for (const int ranks : {64, 1024}) {
    const auto t0 = std::chrono::steady_clock::now();
    const SearchResult r = plan_layouts(saved, {ranks, 16}, 4 * ranks, {});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(r.best);
    std::cout << ranks << " ranks: " << r.considered << " layouts in " << seconds << " s, best "
              << r.best->layout.describe() << ", " << r.best->prediction.step_s << " s a step\n";
    EXPECT_EQ(r.best->layout.ranks(), ranks);
  }
}

// A link timed at a few sizes (a bend where MPI changes protocol, as TCP's 64 KB eager limit makes one):
// times between them interpolated, its smallest below them, its line beyond them; the cost model takes
// the ring's steps for collectives and the messages for a pipeline's activations.
TEST(Planner, LinksTimedBySizeAreInterpolatedAndCostTheCollectivesAndMessagesApart) {
  Link link{50e-6, 1e9};
  link.ring_steps = {{1024, 2e-3}, {65536, 7e-3}, {1 << 20, 8e-3}};
  link.messages = {{1024, 40e-6}, {65536, 8e-3}};
  EXPECT_DOUBLE_EQ(link.ring_step_s(100), 2e-3);
  EXPECT_DOUBLE_EQ(link.ring_step_s(1024 + (65536 - 1024) / 4.0), 2e-3 + 5e-3 / 4);
  EXPECT_DOUBLE_EQ(link.ring_step_s(2 << 20), 8e-3 + (1 << 20) / 1e9);
  EXPECT_DOUBLE_EQ(link.message_s(65536 + 1e6), 8e-3 + 1e-3);
  EXPECT_DOUBLE_EQ(Link(50e-6, 1e9).message_s(1e6), 50e-6 + 1e-3);  // nothing timed: the line
  const Link slowed = link.slowed(3);
  EXPECT_DOUBLE_EQ(slowed.ring_step_s(1024 + (65536 - 1024) / 4.0), 3 * (2e-3 + 5e-3 / 4));
  EXPECT_DOUBLE_EQ(slowed.message_s(65536 + 1e6), 3 * (8e-3 + 1e-3));

  // Data parallelism on 2 ranks all-reduces seed_cnn's 285,226 parameters (1.14 MB) in 2 ring steps of
  // half of them; a 2-stage pipeline cut after the second max-pool sends 16 KB an image each way. Where a
  // message takes far longer than a stage's slot (1.3 ms here at 16 images), as these latencies do, stage 0
  // keeps 1F1B's two micro-batches in flight, so each pair waits for one round trip of two messages.
  Profile p = seed_cnn_profile(link);
  double params = 0;
  for (const auto& l : p.layers) params += l.params;
  const Prediction data = predict(p, {2, 2}, Layout{2, 1, 1, 1, {7}, {}, 32}, 64);
  EXPECT_NEAR(data.reduce_s, 2 * link.ring_step_s(4 * params / 2) + params * p.optimizer_s_per_param, 1e-12);
  Profile faster_messages = p;
  faster_messages.within_node.messages = {{1024, 20e-6}, {65536, 4e-3}};
  for (const int M : {1, 4}) {
    const Layout pipe{1, 2, 1, M, {4, 3}, {}, 64};
    const double bytes = 64.0 / M * 64 * 8 * 8 * 4;
    const double slower_by = link.message_s(bytes) - faster_messages.within_node.message_s(bytes);
    EXPECT_NEAR(predict(p, {2, 2}, pipe, 64).step_s - predict(faster_messages, {2, 2}, pipe, 64).step_s,
                2 * ((M + 1) / 2) * slower_by, 1e-12)
        << M << " micro-batches";
  }
}

// A re-plan times the links up to 1 MB: the larger sizes timed at start follow, as much slower as the
// link is now at 1 MB.
TEST(Planner, ALinkTimedUpToASizeTakesTheLargerOnesTimedBeforeScaled) {
  Link before{1e-3, 2e9};
  before.ring_steps = {{1024, 1e-3}, {1 << 20, 2e-3}, {16 << 20, 10e-3}};
  before.messages = {{1024, 1e-4}, {1 << 20, 1e-3}, {16 << 20, 8e-3}};
  Link now{2e-3, 1e8};
  now.ring_steps = {{1024, 2e-3}, {1 << 20, 4e-3}};
  const Link extended = now.extended_by(before);
  ASSERT_EQ(extended.ring_steps.size(), 3u);
  EXPECT_DOUBLE_EQ(extended.ring_step_s(16 << 20), 20e-3);
  EXPECT_DOUBLE_EQ(extended.ring_step_s(32 << 20), 20e-3 + (16 << 20) / 1e9);  // before's bandwidth, halved
  EXPECT_DOUBLE_EQ(extended.ring_step_s(1024), 2e-3);
  EXPECT_TRUE(extended.messages.empty()) << "no message timed now: nothing to scale the larger ones by";
  EXPECT_DOUBLE_EQ(before.extended_by(now).ring_step_s(32 << 20), before.ring_step_s(32 << 20))
      << "nothing larger to take";
}

TEST(Planner, AProfileAtTheSlowestRanksPaceScalesEveryLayerAlikeAndPredictsItsStep) {
  Profile p = alexnet_profile(kFast, kFast);
  p.layers[0].fixed_seconds = 1e-3;
  const double mean = layers_seconds(p);
  EXPECT_NEAR(mean, 32 * (20e-3 + 1.5e-3 + 0.7e-3 + 0.2e-3) + 1e-3, 1e-15);
  const Profile slowest = at_pace(p, 1.5 * mean);  // one rank 1.5x slower than the ranks' mean
  EXPECT_NEAR(layers_seconds(slowest), 1.5 * mean, 1e-15);
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    EXPECT_DOUBLE_EQ(slowest.layers[i].seconds, 1.5 * p.layers[i].seconds) << i;
    EXPECT_DOUBLE_EQ(slowest.layers[i].fixed_seconds, 1.5 * p.layers[i].fixed_seconds) << i;
  }
  // Data parallelism's compute is one rank's: the step follows the slowest rank's.
  const Layout data{2, 1, 1, 1, {4}, {}, 32};
  const Prediction at_mean = predict(p, {2, 2}, data, 64), at_slowest = predict(slowest, {2, 2}, data, 64);
  EXPECT_NEAR(at_slowest.compute_s, 1.5 * at_mean.compute_s, 1e-12);
  EXPECT_NEAR(at_slowest.step_s - at_mean.step_s, 0.5 * at_mean.compute_s, 1e-12);
  Profile idle = p;
  for (auto& l : idle.layers) l.seconds = l.fixed_seconds = 0;
  EXPECT_EQ(to_text(at_pace(idle, 1.0)), to_text(idle)) << "no time to scale";
}

TEST(Planner, AProfileSurvivesItsTextForm) {
  Profile p = alexnet_profile(kFast, kSlow);
  p.between_nodes.ring_steps = {{1024, 2e-3}, {65536, 7e-3}};
  p.between_nodes.messages = {{1024, 4e-5}, {65536, 8e-3}};
  EXPECT_EQ(to_text(p).find("whole_share"), std::string::npos) << "written where measured";
  p.layers[2].whole_share = 0.125;
  p.layers[3].one_image_seconds = 2.5e-4;
  EXPECT_EQ(to_text(p).find("gather_extra_s"), std::string::npos) << "written where measured";
  p.gather_extra_s = 1.5e-4;
  const Profile back = profile_from_text(to_text(p), "text");
  EXPECT_DOUBLE_EQ(back.gather_extra_s, 1.5e-4);
  EXPECT_EQ(to_text(back), to_text(p));
  EXPECT_DOUBLE_EQ(back.layers[2].whole_share, 0.125);
  EXPECT_DOUBLE_EQ(back.layers[1].whole_share, 0);
  EXPECT_DOUBLE_EQ(back.layers[3].one_image_seconds, 2.5e-4);
  ASSERT_EQ(back.layers.size(), 4u);
  EXPECT_EQ(back.layers[1].name, "dense 9216->4096");
  EXPECT_EQ(back.layers[1].split, SplitKind::dense);
  EXPECT_DOUBLE_EQ(back.between_nodes.bytes_per_s, kSlow.bytes_per_s);
  ASSERT_EQ(back.between_nodes.messages.size(), 2u);
  EXPECT_DOUBLE_EQ(back.between_nodes.messages[1].seconds, 8e-3);
  EXPECT_DOUBLE_EQ(back.between_nodes.ring_steps[1].bytes, 65536);
  EXPECT_TRUE(back.within_node.ring_steps.empty());
  const std::string bad_timings[] = {"between_nodes_messages 1024 4e-5 512 8e-3\n",  // sizes must grow
                                     "between_nodes_messages 1024 4e-5 2048 1e-5\n",  // times never fall
                                     "between_nodes_messages 1024\n", "between_nodes_messages 1024 4e-5 2048\n",
                                     "between_nodes_ring 1024 1e-3\n", "whole_share 0 0.5\n",
                                     "whole_share 0 0 1.5 0\n", "whole_share 0 0 x 0\n",
                                     "one_image_seconds 1 2 3\n", "one_image_seconds 1 2 -3 4\n"};
  for (const std::string& line : bad_timings)
    EXPECT_THROW(profile_from_text(to_text(p) + line, "timings.txt"), InputError) << line;
  EXPECT_THROW(profile_from_text("model x\n", "bad.txt"), InputError);
  EXPECT_THROW(profile_from_text("ddl-profile 1\nbatch 32\nlayer 1 2 3\n", "short.txt"), InputError);
  EXPECT_THROW(profile_from_text("ddl-profile 1\nbatch 32\nlayer 1 2 3 4 sideways 0 x\n", "kind.txt"), InputError);
  // Negative or endless figures, and a split layer that names nothing to divide, would plan free layers,
  // negative memory or a split no group size passes.
  const std::string bad_figures[] = {"base_bytes -30367744\n", "optimizer_floats -7\n", "measured_bytes inf\n",
                                     "optimizer_s_per_param -1e-9\n", "gather_extra_s -2e-4\n",
                                     "layer -1e-3 100 4 4 none 0 0 conv\n",
                                     "layer 1e-3 -100 4 4 none 0 0 conv\n", "layer 1e-3 100 4 4 dense 0 0 fc\n",
                                     "layer 1e-3 100 4 4 none 0 -1e-4 conv\n"};
  for (const std::string& line : bad_figures)
    EXPECT_THROW(profile_from_text("ddl-profile 1\nbatch 32\n" + line + "layer 1e-3 100 4 4 dense 10 0 fc\n",
                                   "figures.txt"),
                 InputError)
        << line;
  EXPECT_NO_THROW(profile_from_text("ddl-profile 1\nbatch 32\nlayer 1e-3 100 4 4 dense 10 0 fc\n", "good.txt"));
}

}  // namespace
}  // namespace ddl
