// launch/'s layout decisions without an MPI job: the manual layout from options, the split layers chosen
// for a model, the planner's choice under each --strategy, and whether a re-plan moves the job.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "launch/replanner.hpp"
#include "launch/strategy.hpp"
#include "launch/tensor_split.hpp"
#include "launch/train/layout_choice.hpp"
#include "models/registry.hpp"

namespace ddl {
namespace {

std::unique_ptr<Model> whole(const std::string& name) {
  ModelConfig config;
  config.num_classes = 10;
  return define_model(name, config);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ManualLayout, IsTheGridTheOptionsGive) {
  TrainOptions o;
  o.pipeline_stages = 2;
  o.micro_batches = 4;
  o.partition = {4, 3};
  o.batch_size = 32;
  o.pipeline_schedule = PipelineSchedule::gpipe;
  o.bucket_mb = 2;
  auto model = whole("seed_cnn");
  const ChosenLayout chosen = manual_layout(o, *model, 6);
  const Layout& l = chosen.layout;
  EXPECT_EQ(l.replicas, 3);
  EXPECT_EQ(l.stages, 2);
  EXPECT_EQ(l.tensor, 1);
  EXPECT_EQ(l.micro_batches, 4);
  EXPECT_EQ(l.cut, (std::vector<std::size_t>{4, 3}));
  EXPECT_TRUE(l.split.empty());
  EXPECT_EQ(l.batch, 32);
  EXPECT_EQ(l.global_batch(), 96);
  EXPECT_EQ(l.schedule, PipelineSchedule::gpipe);
  EXPECT_EQ(l.bucket_bytes, 2.0 * (1 << 20));
  EXPECT_FALSE(l.buckets_overlap_backward());  // a pipeline averages after the step
  EXPECT_TRUE(chosen.split_report.empty() && chosen.plan_report.empty());
}

TEST(ManualLayout, RefusesARankCountThatFormsNoGrid) {
  TrainOptions o;
  o.pipeline_stages = 4;
  auto model = whole("seed_cnn");
  try {
    manual_layout(o, *model, 6);
    FAIL() << "6 ranks into 4 stages";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "6 ranks do not form a grid of replicas x 4 pipeline stages x 1 tensor-parallel"))
        << e.what();
  }
}

TEST(ManualLayout, DealsAGlobalBatchAmongTheRanksThatBringImages) {
  TrainOptions o;
  o.pipeline_stages = 2;
  o.micro_batches = 2;
  o.global_batch = 48;
  auto model = whole("seed_cnn");
  // 6 ranks: 3 replicas of 2 stages, 16 images each; 4 ranks (after a lost node): 2 replicas, 24 each.
  EXPECT_EQ(manual_layout(o, *model, 6).layout.batch, 16);
  EXPECT_EQ(manual_layout(o, *model, 4).layout.batch, 24);
  EXPECT_EQ(manual_layout(o, *model, 4).layout.global_batch(), 48);
  o.micro_batches = 5;  // 16 images a replica do not split into 5 micro-batches
  try {
    manual_layout(o, *model, 6);
    FAIL() << "16 images into 5 micro-batches";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--global-batch 48 does not divide among 3 ranks that bring their own images in 5 micro-batches each");
  }
}

TEST(MemoryLimit, IsTheOptionOrTheNodesMemorySharedAmongItsRanksLessATenth) {
  TrainOptions o;
  std::istringstream meminfo("MemTotal:       16000000 kB\nMemFree:         8000000 kB\n");
  EXPECT_DOUBLE_EQ(memory_limit_bytes(o, meminfo, 4), 0.9 * 16000000.0 * 1024 / 4);
  std::istringstream silent("MemFree: 8000000 kB\n");
  EXPECT_EQ(memory_limit_bytes(o, silent, 4), 0);  // unknown: no limit
  o.memory_limit_gb = 2.5;
  std::istringstream unread("MemTotal: 16000000 kB\n");
  EXPECT_DOUBLE_EQ(memory_limit_bytes(o, unread, 4), 2.5e9);
}

TEST(ManualLayout, SplitsTheClassifierLayersTheGroupDivides) {
  TrainOptions o;
  o.tensor_parallel = 4;
  auto model = whole("seed_cnn");  // dense 4096->64 at 5, dense 64->10 at 6
  const ChosenLayout chosen = manual_layout(o, *model, 8);
  EXPECT_EQ(chosen.layout.split, (std::vector<std::size_t>{5}));
  EXPECT_EQ(chosen.layout.split_kind, SplitKind::dense);
  EXPECT_EQ(chosen.layout.data_ranks(), 8);  // split dense layers gather the group's images
  EXPECT_TRUE(has(chosen.split_report, "the group's batch is gathered at layer 5")) << chosen.split_report;
  EXPECT_TRUE(has(chosen.split_report, "whole on every rank: 6 (10 outputs), which 4 does not divide"))
      << chosen.split_report;
}

TEST(TensorSplit, BlocksShareABatchAndIndicesAreChecked) {
  auto vit = whole("vit_tiny");
  const TensorSplitChoice blocks = choose_tensor_split("blocks", *vit, 3);
  EXPECT_FALSE(blocks.layers.empty());
  EXPECT_EQ(blocks.kind, SplitKind::block);
  EXPECT_TRUE(has(blocks.report, "the group shares one batch")) << blocks.report;

  auto cnn = whole("seed_cnn");
  EXPECT_THROW(choose_tensor_split("blocks", *cnn, 2), InputError);
  EXPECT_THROW(choose_tensor_split("0", *cnn, 2), InputError);    // a convolution
  EXPECT_THROW(choose_tensor_split("9", *cnn, 2), InputError);    // no such layer
  EXPECT_THROW(choose_tensor_split("6", *cnn, 4), InputError);    // 4 does not divide 10 outputs
  EXPECT_THROW(choose_tensor_split("5,x", *cnn, 2), InputError);  // not an index
  const TensorSplitChoice indices = choose_tensor_split("6,5,6", *cnn, 2);
  EXPECT_EQ(indices.layers, (std::vector<std::size_t>{5, 6}));
  EXPECT_EQ(indices.kind, SplitKind::dense);
}

// seed_cnn's layers with made-up times on a slow network: its split classifier, its pipelines.
Profile seed_cnn_profile() {
  Profile p;
  p.model = "seed_cnn";
  p.batch = 32;
  p.optimizer_s_per_param = 1e-9;
  p.base_bytes = 50e6;
  auto layer = [](const char* name, double s, double params, double in, double out, SplitKind k = SplitKind::none,
                  int divisor = 0) { return LayerCost{name, s, params, in, out, k, divisor, 0}; };
  p.layers = {layer("conv2d 3->32", 2e-5, 896, 12288, 131072),
              layer("max_pool", 2e-6, 0, 131072, 32768),
              layer("conv2d 32->64", 6e-5, 18496, 32768, 65536),
              layer("max_pool", 1e-6, 0, 65536, 16384),
              layer("flatten", 1e-7, 0, 16384, 16384),
              layer("dense 4096->64", 1e-5, 262208, 16384, 256, SplitKind::dense, 64),
              layer("dense 64->10", 1e-6, 650, 256, 40, SplitKind::dense, 10)};
  p.within_node = p.between_nodes = Link{50e-6, 1.25e8};
  return p;
}

TEST(PlanStrategy, EachStrategyKeepsToItsKindOfLayout) {
  TrainOptions o;
  o.batch_size = 16;
  const Profile p = seed_cnn_profile();
  o.strategy = Strategy::data;
  const PlanReport data = plan_strategy(o, p, {4, 2}, 0);
  EXPECT_EQ(data.chosen.layout.replicas, 4) << data.chosen.layout.describe();
  EXPECT_EQ(data.chosen.layout.global_batch(), 64);
  EXPECT_TRUE(has(data.text, "plan (--strategy data, global batch 64 on 4 ranks, 2 a node)")) << data.text;
  o.strategy = Strategy::pipeline;
  const PlanReport pipeline = plan_strategy(o, p, {4, 2}, 0);
  EXPECT_GE(pipeline.chosen.layout.stages, 2) << pipeline.chosen.layout.describe();
  EXPECT_EQ(pipeline.chosen.layout.tensor, 1);
  EXPECT_EQ(pipeline.chosen.layout.global_batch(), 64);
  o.strategy = Strategy::automatic;
  o.fixed_tensor = 2;
  const PlanReport split = plan_strategy(o, p, {4, 2}, 0);
  EXPECT_EQ(split.chosen.layout.tensor, 2);
  EXPECT_EQ(split.chosen.layout.split_kind, SplitKind::dense);
  EXPECT_EQ(split.chosen.layout.global_batch(), 64);
  EXPECT_THROW(plan_strategy(o, p, {4, 2}, 1e6), InputError);  // nothing fits in 1 MB
}

TEST(PlanStrategy, ALimitNoLayoutFitsIsRefusedWithTheLimitThatWould) {
  TrainOptions o;
  o.batch_size = 16;
  o.strategy = Strategy::automatic;
  const Profile p = seed_cnn_profile();
  for (const double images : {0.0, 30e6}) {
    std::string error;
    try {
      plan_strategy(o, p, {4, 2}, 1e6, images);
    } catch (const InputError& e) {
      error = e.what();
    }
    std::smatch m;
    ASSERT_TRUE(std::regex_search(error, m, std::regex("it needs --memory-limit ([0-9.]+) at least$"))) << error;
    EXPECT_EQ(error.find("of training images") != std::string::npos, images > 0) << error;
    // The limit named fits the leanest layout, the images kept beside it; a little less fits none.
    const double needed = std::stod(m[1]) * 1e9;
    EXPECT_NO_THROW(plan_strategy(o, p, {4, 2}, needed, images)) << error;
    EXPECT_THROW(plan_strategy(o, p, {4, 2}, 0.985 * needed, images), InputError) << error;
  }
}

TEST(PlanStrategy, ShardsOrRecomputesWhereTheMemoryLimitAsksAndSaysWhy) {
  TrainOptions o;
  o.batch_size = 16;
  o.optimizer = OptimizerKind::adam;
  o.strategy = Strategy::data;
  Profile p = seed_cnn_profile();
  p.optimizer_floats = 2;
  p.layers[5].params = 20e6;  // the parameters' state, not the activations, fills the memory
  const PlanReport free = plan_strategy(o, p, {4, 4}, 0);
  EXPECT_FALSE(free.chosen.layout.shards_optimizer_state()) << free.text;
  EXPECT_FALSE(free.chosen.layout.recomputes_any()) << free.text;
  EXPECT_FALSE(has(free.text, "why")) << free.text;
  Layout sharded = free.chosen.layout;
  sharded.shard_state = 1;
  const double sharded_peak = predict(p, {4, 4}, sharded, 64).peak_bytes;
  const PlanReport tight = plan_strategy(o, p, {4, 4}, (sharded_peak + free.chosen.prediction.peak_bytes) / 2);
  EXPECT_TRUE(tight.chosen.layout.shards_optimizer_state()) << tight.text;
  EXPECT_TRUE(has(tight.text, "why        optimizer state sharded: peak ")) << tight.text;
  EXPECT_TRUE(has(tight.text, " (over the planned limit)")) << tight.text;
  // Not on its own across nodes, where the checkpoint folder may not be shared, nor where forbidden: then
  // nothing fits that limit.
  EXPECT_THROW(plan_strategy(o, p, {4, 2}, (sharded_peak + free.chosen.prediction.peak_bytes) / 2), InputError);
  o.shard_state = 0;
  EXPECT_THROW(plan_strategy(o, p, {4, 4}, (sharded_peak + free.chosen.prediction.peak_bytes) / 2), InputError);
  // Asked for, whatever the memory.
  o.shard_state = 1;
  const PlanReport asked = plan_strategy(o, p, {4, 4}, 0);
  EXPECT_TRUE(asked.chosen.layout.shards_optimizer_state());
  EXPECT_TRUE(has(asked.text, "why        optimizer state sharded (asked for): peak ")) << asked.text;
  o.shard_state = TrainOptions::kShardStateAuto;
  o.recompute = true;
  const PlanReport recomputed = plan_strategy(o, p, {4, 4}, 0);
  EXPECT_EQ(recomputed.chosen.layout.recompute, std::vector<char>{1}) << recomputed.text;
  EXPECT_TRUE(has(recomputed.text, "why        activations recomputed (asked for): peak ")) << recomputed.text;
  o.recompute = false;
  // LAMB shards as Adam does, its arrays' norms summed over the replicas.
  o.optimizer = OptimizerKind::lamb;
  const PlanReport lamb = plan_strategy(o, p, {4, 4}, (sharded_peak + free.chosen.prediction.peak_bytes) / 2);
  EXPECT_TRUE(lamb.chosen.layout.shards_optimizer_state()) << lamb.text;
}

TEST(PlannedLayout, ReportsItsSplitAsAManualOneWould) {
  auto model = whole("seed_cnn");
  PlanReport plan;
  plan.chosen.layout.replicas = 2;
  plan.chosen.layout.tensor = 2;
  plan.chosen.layout.cut = {7};
  plan.chosen.layout.split = {5, 6};
  plan.chosen.layout.split_kind = SplitKind::dense;
  plan.chosen.layout.batch = 8;
  plan.chosen.prediction.step_s = 0.25;
  plan.text = "plan ...\n";
  const ChosenLayout chosen = planned_layout(plan, *model);
  EXPECT_EQ(chosen.split_report, choose_tensor_split("5,6", *model, 2).report);
  EXPECT_EQ(chosen.plan_report, "plan ...\n");
  EXPECT_EQ(chosen.predicted_step_s, 0.25);
}

TEST(Replanning, MovesOnlyToAnotherLayoutAtLeastTenPercentFaster) {
  Layout now;
  now.replicas = 4;
  now.cut = {7};
  now.batch = 16;
  Prediction predicted;
  predicted.step_s = 1.0;
  Plan same{now, {}};
  same.prediction.step_s = 0.5;
  EXPECT_FALSE(worth_moving(now, predicted, same));
  Plan other{now, {}};
  other.layout.replicas = 2;
  other.layout.stages = 2;
  other.layout.cut = {4, 3};
  other.prediction.step_s = 0.95;
  EXPECT_FALSE(worth_moving(now, predicted, other));
  other.prediction.step_s = 0.89;
  EXPECT_TRUE(worth_moving(now, predicted, other));
}

}  // namespace
}  // namespace ddl
