// Pipeline pieces that need no MPI: the schedules, the balanced cut, models cut into stages (same
// parameters, same outputs and gradients as the whole model), and checkpoints written stage by stage.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/layers/batch_norm2d.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/pool2d.hpp"
#include "core/layers/softmax_cross_entropy.hpp"
#include "core/optim/optimizer.hpp"
#include "core/plan/balanced_partition.hpp"
#include "core/plan/pipeline_timing.hpp"
#include "core/train/checkpoint.hpp"
#include "core/train/pipeline_schedule.hpp"
#include "models/registry.hpp"
#include "tests/core/tensor_util.hpp"
#include "tests/data/fixtures.hpp"

namespace ddl {
namespace {

std::string spell(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const auto& op : ops) s += (op.forward ? "F" : "B") + std::to_string(op.micro) + " ";
  return s;
}

TEST(PipelineSchedule, GpipeRunsEveryForwardThenEveryBackward) {
  EXPECT_EQ(spell(stage_ops(PipelineSchedule::gpipe, 1, 3, 3)), "F0 F1 F2 B0 B1 B2 ");
  EXPECT_EQ(micro_batches_in_flight(stage_ops(PipelineSchedule::gpipe, 0, 4, 8)), 8);
}

TEST(PipelineSchedule, OneForwardOneBackwardKeepsFewerInFlight) {
  EXPECT_EQ(spell(stage_ops(PipelineSchedule::one_f_one_b, 0, 3, 4)), "F0 F1 F2 B0 F3 B1 B2 B3 ");
  EXPECT_EQ(spell(stage_ops(PipelineSchedule::one_f_one_b, 2, 3, 4)), "F0 B0 F1 B1 F2 B2 F3 B3 ");
  EXPECT_EQ(spell(stage_ops(PipelineSchedule::one_f_one_b, 0, 4, 2)), "F0 F1 B0 B1 ");
  for (int stage = 0; stage < 4; ++stage)
    EXPECT_EQ(micro_batches_in_flight(stage_ops(PipelineSchedule::one_f_one_b, stage, 4, 16)), 4 - stage);
}

TEST(PipelineSchedule, EveryMicroBatchRunsForwardOnceThenBackwardOnce) {
  for (auto schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    for (int stages = 1; stages <= 5; ++stages)
      for (int stage = 0; stage < stages; ++stage)
        for (int m = 1; m <= 9; ++m) {
          std::vector<int> forwards(static_cast<std::size_t>(m)), backwards(static_cast<std::size_t>(m));
          int next_backward = 0;
          for (const auto& op : stage_ops(schedule, stage, stages, m)) {
            if (op.forward) {
              ++forwards[static_cast<std::size_t>(op.micro)];
            } else {
              ASSERT_EQ(forwards[static_cast<std::size_t>(op.micro)], 1);
              ASSERT_EQ(op.micro, next_backward++);  // backwards in micro-batch order: the same sums
              ++backwards[static_cast<std::size_t>(op.micro)];
            }
          }
          EXPECT_EQ(forwards, std::vector<int>(static_cast<std::size_t>(m), 1));
          EXPECT_EQ(backwards, std::vector<int>(static_cast<std::size_t>(m), 1));
        }
}

TEST(PipelineSchedule, IdealBubble) {
  EXPECT_DOUBLE_EQ(ideal_bubble(4, 4), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(ideal_bubble(1, 8), 0.0);
}

// Hand-traced timelines: forward 1 s and backward 2 s a micro-batch unless said.
TEST(PipelineSchedule, StepTimeFollowsEachStagesOpsAndTheirMessages) {
  const auto one_f_one_b = PipelineSchedule::one_f_one_b, gpipe = PipelineSchedule::gpipe;
  EXPECT_DOUBLE_EQ(pipeline_step_seconds(one_f_one_b, {{1, 2}}, {}, 3), 9.0) << "one stage: its micro-batches in turn";
  // F0 on stage 0 [0, 1], its message [1, 1.5], F0 and B0 on stage 1 [1.5, 4.5], back [4.5, 5], B0 [5, 7].
  EXPECT_DOUBLE_EQ(pipeline_step_seconds(one_f_one_b, {{1, 2}, {1, 2}}, {{0.5, 0.5}}, 1), 7.0);
  // Two micro-batches over three equal stages and links of 1 s: the path of one (3 x 3 s + 4 messages)
  // and one stage's more.
  EXPECT_DOUBLE_EQ(pipeline_step_seconds(one_f_one_b, {{1, 2}, {1, 2}, {1, 2}}, {{1, 1}, {1, 1}}, 2), 16.0);
  // A last stage of no time: stage 1 runs F0 [2, 3], F1 [3, 4], B0 [5, 7], B1 [7, 9]; stage 0's B0 [8, 10]
  // and B1, whose gradient arrives at 10, [10, 12] (the path plus the busiest stage once more: 13).
  EXPECT_DOUBLE_EQ(pipeline_step_seconds(one_f_one_b, {{1, 2}, {1, 2}, {0, 0}}, {{1, 1}, {1, 1}}, 2), 12.0);
  EXPECT_DOUBLE_EQ(pipeline_step_seconds(gpipe, {{1, 2}, {1, 2}}, {{0, 0}}, 2), 9.0);
  // A link slower than the stages holds them back, one message at a time: F1's [4, 7] after F0's [1, 4];
  // stage 1 runs F0 [4, 5], F1 [7, 8], B0 [8, 10], B1 [10, 12]; B0's gradient [10, 13], B1's [13, 16];
  // stage 0's B1 [16, 18].
  EXPECT_DOUBLE_EQ(pipeline_step_seconds(gpipe, {{1, 2}, {1, 2}}, {{3, 3}}, 2), 18.0);
  // Messages of 3 s latency that take the link for no time go side by side: F0's [1, 4], F1's [2, 5];
  // stage 1 [4, 10]; the gradients [8, 11] and [10, 13]; stage 0's B0 [11, 13], B1 [13, 15].
  EXPECT_DOUBLE_EQ(pipeline_step_seconds(gpipe, {{1, 2}, {1, 2}}, {{3, 0}}, 2), 15.0);
  // More micro-batches than stages, messages of 1 s latency: stage 0 runs F0 [0, 1], F1 [1, 2], then B0
  // when its gradient arrives [6, 8], F2 [8, 9], B1 [9, 11], B2 [14, 16]; stage 1 runs F0 [2, 3], B0 [3, 5],
  // F1 [5, 6], B1 [6, 8], F2 [10, 11], B2 [11, 13]. Each micro-batch in 1F1B's steady state waits for a
  // round trip.
  EXPECT_DOUBLE_EQ(pipeline_step_seconds(one_f_one_b, {{1, 2}, {1, 2}}, {{1, 0}}, 3), 16.0);
  // Equal stages and free links: (M + S - 1) slots, under both schedules.
  for (const auto schedule : {gpipe, one_f_one_b})
    for (const int stages : {1, 2, 4})
      for (const int m : {1, 3, 8})
        EXPECT_DOUBLE_EQ(pipeline_step_seconds(schedule, std::vector<StageSeconds>(stages, {1, 2}),
                                               std::vector<MessageSeconds>(stages - 1), m),
                         3.0 * (m + stages - 1))
            << stages << " stages, " << m << " micro-batches";
  EXPECT_THROW(pipeline_step_seconds(gpipe, {{1, 2}, {1, 2}}, {}, 2), Error);
}

TEST(Partition, BalancesTimeAndMemory) {
  EXPECT_EQ(balanced_partition({3, 1, 1, 1}, {0, 0, 0, 0}, 2), (std::vector<std::size_t>{1, 3}));
  EXPECT_EQ(balanced_partition({1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0}, 3), (std::vector<std::size_t>{2, 2, 2}));
  // By time alone 3 + 3; the memory of the last two layers pulls the cut to 5 + 1.
  EXPECT_EQ(balanced_partition({1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 3, 3}, 2), (std::vector<std::size_t>{5, 1}));
  EXPECT_THROW(balanced_partition({1, 1}, {1, 1}, 3), InputError);
}

// Layers that share a weight stay in one stage: no stage starts at a layer kept with the one before it.
TEST(Partition, KeepsLayersThatShareAWeightTogether) {
  const std::vector<double> ones(6, 1.0), none(6, 0.0);
  // Not 3 + 3, whose second stage would start at layer 3.
  EXPECT_EQ(balanced_partition(ones, none, 2, {false, false, false, true, false, false}),
            (std::vector<std::size_t>{2, 4}));
  EXPECT_EQ(balanced_partition(ones, none, 3, {false, false, true, true, false, false}),
            (std::vector<std::size_t>{1, 3, 2}));
  EXPECT_THROW(balanced_partition(ones, none, 3, {false, true, true, true, true, false}), InputError);
}

TEST(Partition, RefusesCutsThatDoNotCoverTheModel) {
  EXPECT_NO_THROW(check_partition({3, 4}, 7, 2));
  EXPECT_THROW(check_partition({3, 3}, 7, 2), InputError);
  EXPECT_THROW(check_partition({7}, 7, 2), InputError);
  EXPECT_THROW(check_partition({0, 7}, 7, 2), InputError);
}

// seed_cnn: 0 conv, 1 pool, 2 conv, 3 pool, 4 flatten, 5 dense, 6 dense.
TEST(ModelStages, HoldTheWholeModelsParametersAndComputeTheSame) {
  Context ctx;
  auto whole = make_model("seed_cnn", {.num_classes = 10}, ctx);
  auto first = make_model("seed_cnn", {.num_classes = 10}, ctx, {0, 3});
  auto second = make_model("seed_cnn", {.num_classes = 10}, ctx, {3, 7});
  whole->initialize(5);
  first->initialize(5);
  second->initialize(5);
  ASSERT_EQ(first->param_count() + second->param_count(), whole->param_count());
  EXPECT_EQ(second->param_offset(), first->param_count());
  EXPECT_EQ(second->whole_param_count(), whole->param_count());
  EXPECT_EQ(second->param_entries()[0].name, "5.weight");
  EXPECT_TRUE(first->is_first_stage() && !first->is_last_stage());
  EXPECT_TRUE(!second->is_first_stage() && second->is_last_stage());
  EXPECT_EQ(std::memcmp(first->params().data(), whole->params().data(), first->param_count() * 4), 0);
  EXPECT_EQ(std::memcmp(second->params().data(), whole->params().data() + first->param_count(),
                        second->param_count() * 4), 0);

  Tensor images(plain_desc({4, 3, 32, 32}), ctx.engine());
  const auto pixels = test::random_values(images.elements(), 11, 0.0f, 1.0f);
  std::copy(pixels.begin(), pixels.end(), images.data());
  const std::vector<std::int32_t> labels = {1, 2, 3, 4};
  SoftmaxCrossEntropy loss;
  const auto expected = test::to_plain(ctx, whole->forward(ctx, images, Mode::train));
  loss.forward(ctx, whole->forward(ctx, images, Mode::train), labels);
  whole->backward(ctx, loss.backward());

  const Tensor& middle = first->forward(ctx, images, Mode::train);
  const Tensor& logits = second->forward(ctx, middle, Mode::train);
  EXPECT_EQ(test::to_plain(ctx, logits), expected);
  loss.forward(ctx, logits, labels);
  const Tensor& diff_middle = second->backward(ctx, loss.backward());
  ASSERT_FALSE(diff_middle.empty());
  EXPECT_TRUE(first->backward(ctx, diff_middle).empty());
  second->release_input_gradient(ctx);
  for (std::size_t i = 0; i < first->param_count(); ++i) ASSERT_EQ(first->grads()[i], whole->grads()[i]) << i;
  for (std::size_t i = 0; i < second->param_count(); ++i)
    ASSERT_EQ(second->grads()[i], whole->grads()[first->param_count() + i]) << i;
}

// Convolutions and dense layers add natively (a summing reorder); BatchNorm through the model's fallback.
TEST(ModelStages, GradientsAccumulateOverMicroBatches) {
  Context ctx;
  auto model = make_model("seed_cnn_bn", {.num_classes = 10}, ctx);
  model->initialize(4);
  // The dropout generator is put back before each pass, so that a batch gets the same mask each time.
  std::vector<std::uint64_t> generator;
  for (const auto& s : model->state()) generator.insert(generator.end(), s.words.begin(), s.words.end());
  SoftmaxCrossEntropy loss;
  auto gradient_of = [&](std::uint64_t seed, bool accumulate) {
    auto next = generator.begin();
    for (const auto& s : model->state())
      for (auto& w : s.words) w = *next++;
    Tensor images(plain_desc({4, 3, 32, 32}), ctx.engine());
    const auto pixels = test::random_values(images.elements(), seed, 0.0f, 1.0f);
    std::copy(pixels.begin(), pixels.end(), images.data());
    loss.forward(ctx, model->forward(ctx, images, Mode::train), std::vector<std::int32_t>{0, 1, 2, 3});
    model->accumulate_gradients(accumulate);
    model->backward(ctx, loss.backward());
    return std::vector<float>(model->grads().begin(), model->grads().end());
  };
  const auto first = gradient_of(1, false), second = gradient_of(2, false);
  gradient_of(1, false);
  const auto both = gradient_of(2, true);
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < both.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(both[i]) - (first[i] + second[i])));
    largest = std::max(largest, std::abs(static_cast<double>(first[i] + second[i])));
  }
  EXPECT_GT(largest, 1e-3);
  EXPECT_LT(worst, 1e-6 * largest);
}

TEST(ModelStages, CopiesShareOneSetOfParameters) {
  Context ctx;
  auto stage = make_model("seed_cnn", {}, ctx, {3, 7});
  auto copy = make_model("seed_cnn", {}, ctx, {3, 7}, stage.get());
  EXPECT_EQ(copy->params().data(), stage->params().data());
  EXPECT_EQ(copy->grads().data(), stage->grads().data());
  auto other_stage = make_model("seed_cnn", {}, ctx, {0, 3});
  EXPECT_THROW(make_model("seed_cnn", {}, ctx, {3, 7}, other_stage.get()), Error);
}

TEST(ModelStages, CheckpointWrittenByStagesLoadsIntoAnyLayout) {
  test::TempDir dir;
  Context ctx;
  const ModelConfig config{.num_classes = 10, .seed = 2};
  std::vector<std::unique_ptr<Model>> stages;
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  for (LayerRange r : {LayerRange{0, 2}, LayerRange{2, 5}, LayerRange{5, 7}}) {
    stages.push_back(make_model("seed_cnn", config, ctx, r));
    stages.back()->initialize(2);
    optimizers.push_back(make_adam(stages.back()->param_count(), {}));
    std::vector<float> grads(stages.back()->param_count(), 0.01f);
    optimizers.back()->step(stages.back()->params(), grads, 1e-2f);
  }
  const std::string path = dir / "c.h5";
  for (std::size_t s = 0; s < stages.size(); ++s) write_checkpoint_part(path, *stages[s], *optimizers[s], {"seed_cnn", 4, 0.5, 2, ""}, {s == 0, true});
  EXPECT_FALSE(std::filesystem::exists(path));  // not published yet: a previous checkpoint would still be there
  publish_checkpoint(path);

  auto whole = make_model("seed_cnn", config, ctx);
  auto adam = make_adam(whole->param_count(), {});
  EXPECT_EQ(load_checkpoint(path, *whole, adam.get()).epochs_done, 4u);
  std::size_t at = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    EXPECT_EQ(std::memcmp(stages[s]->params().data(), whole->params().data() + at, stages[s]->param_count() * 4), 0);
    const auto m = optimizers[s]->state()[0].floats;  // Adam's first moment
    EXPECT_TRUE(std::equal(m.begin(), m.end(), adam->state()[0].floats.begin() + static_cast<std::ptrdiff_t>(at)));
    at += stages[s]->param_count();
  }
  EXPECT_EQ(adam->state()[2].words[0], 1u);  // the step count

  // And back into another cut.
  auto tail = make_model("seed_cnn", config, ctx, {3, 7});
  load_checkpoint(path, *tail, nullptr);
  EXPECT_EQ(std::memcmp(tail->params().data(), whole->params().data() + tail->param_offset(), tail->param_count() * 4),
            0);
}

// A stage's input comes plain (the trainer sends plain messages) where the whole model's BatchNorm took its
// convolution's blocked output: the BatchNorm normalises in the convolution's layout either way, so the stages
// compute the whole model's bits (oneDNN's plain-layout kernel sums in another order).
TEST(ModelStages, AStageStartingWithABatchNormComputesTheWholeModelsBits) {
  const auto conv_bn_pool = [] {
    auto model = std::make_unique<Model>("conv bn", dims_t{3, 8, 8}, 5);
    model->add(
        std::make_unique<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 64, .kernel = 3, .padding = 1}));
    model->add(std::make_unique<BatchNorm2d>(BatchNorm2dOptions{.channels = 64, .relu = true}));
    model->add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 3, .stride = 2, .padding = 1}));
    model->add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::global_avg}));
    model->add(std::make_unique<Flatten>());
    model->add(std::make_unique<Dense>(DenseOptions{.in_features = 64, .out_features = 5}));
    return model;
  };
  Context ctx;
  auto whole = conv_bn_pool();
  whole->finalize(ctx);
  whole->initialize(7);
  const dims_t in = {4, 3, 8, 8};
  Tensor x = test::from_plain(ctx, test::random_values(product(in), 1), plain_desc(in));
  const auto diff = test::random_values(20, 2);
  const auto expected = test::to_plain(ctx, whole->forward(ctx, x, Mode::train));
  whole->backward(ctx, test::from_plain(ctx, diff, whole->output_desc()));

  auto first = conv_bn_pool(), second = conv_bn_pool();
  first->keep_layers(0, 1);
  second->keep_layers(1, 6);
  for (auto* stage : {first.get(), second.get()}) {
    stage->finalize(ctx);
    stage->initialize(7);
  }
  const Tensor& made = first->forward(ctx, x, Mode::train);
  Tensor sent = test::from_plain(ctx, test::to_plain(ctx, made), plain_desc(made.dims()));
  EXPECT_EQ(test::to_plain(ctx, second->forward(ctx, sent, Mode::train)), expected);
  const Tensor& back = second->backward(ctx, test::from_plain(ctx, diff, second->output_desc()));
  ASSERT_EQ(back.desc(), plain_desc(back.dims()));  // in its input's layout, as the trainer sends it
  first->backward(ctx, test::from_plain(ctx, test::to_plain(ctx, back), first->output_desc()));
  second->release_input_gradient(ctx);
  for (auto* stage : {first.get(), second.get()})
    EXPECT_EQ(std::memcmp(stage->grads().data(), whole->grads().data() + stage->param_offset(),
                          stage->param_count() * sizeof(float)),
              0);
}

}  // namespace
}  // namespace ddl
