// ddl_train's options without a job: words parsed into their enums once and written back by describe(),
// what a strategy takes from the layout's options, and what a resumed run says changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/error.hpp"
#include "models/registry.hpp"
#include "launch/train/run_report.hpp"
#include "launch/train_options.hpp"
#include "launch/optimizer_choice.hpp"

namespace ddl {
namespace {

std::optional<TrainOptions> parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"ddl_train", "--train", "data.h5"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainOptionsParsing, EnumsFromTheirWordsAndBack) {
  const auto o = parse({"--allreduce", "ring", "--lr-schedule", "cosine", "--schedule", "gpipe"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->allreduce_algorithm, AllreduceAlgorithm::ring);
  EXPECT_EQ(o->lr_policy, LrPolicy::cosine);
  EXPECT_EQ(o->pipeline_schedule, PipelineSchedule::gpipe);
  const std::string text = o->describe();
  EXPECT_NE(text.find("\nallreduce = ring\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nlr-schedule = cosine\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nschedule = gpipe\n"), std::string::npos) << text;
  const auto defaults = parse({});
  EXPECT_EQ(defaults->allreduce_algorithm, AllreduceAlgorithm::hierarchical);
  EXPECT_NE(defaults->describe().find("\nallreduce = hier\n"), std::string::npos);
  EXPECT_NE(defaults->describe().find("\nschedule = 1f1b\n"), std::string::npos);
}

TEST(TrainOptionsParsing, AWordThatNamesNothingIsRefusedWithTheWordsThatDo) {
  EXPECT_EQ(error_of({"--allreduce", "tree"}), "--allreduce must be ring, hier or mpi, not 'tree'");
  EXPECT_EQ(error_of({"--lr-schedule", "linear"}),
            "--lr-schedule must be constant, step, cosine or poly, not 'linear'");
  EXPECT_EQ(error_of({"--schedule", "zb"}), "--schedule must be gpipe or 1f1b, not 'zb'");
  EXPECT_EQ(error_of({"--allreduce-wire", "bf16"}), "--allreduce-wire bf16 needs --allreduce ring");
}

TEST(TrainOptionsParsing, ShardedStateAndLayerwiseOptimizersRefuseWhatTheyCannotDo) {
  EXPECT_TRUE(parse({"--shard-state", "1", "--optimizer", "sgd"}));
  EXPECT_EQ(parse({"--shard-state", "3", "--bucket-mb", "4"})->shard_state, 3);
  EXPECT_NE(error_of({"--shard-state", "4"}).find("must be auto, 0, 1, 2 or 3"), std::string::npos);
  EXPECT_EQ(parse({"--shard-state", "2", "--bucket-mb", "4"})->shard_state, 2);  // stage 2 takes buckets
  EXPECT_EQ(parse({"--shard-state", "1", "--strategy", "auto"})->shard_state, 1);  // asks the planner for it
  EXPECT_EQ(parse({"--shard-state", "3", "--tensor-parallel", "2"})->shard_state, 3);  // split layers shard too
  EXPECT_EQ(parse({"--shard-state", "1", "--optimizer", "lamb"})->shard_state, 1);  // layer norms summed over shards
  EXPECT_EQ(parse({"--shard-state", "3", "--optimizer", "lars"})->shard_state, 3);
  EXPECT_NE(error_of({"--shard-state", "1", "--bucket-mb", "4"}).find("without --bucket-mb"), std::string::npos);
  EXPECT_NE(error_of({"--shard-state", "1", "--allreduce", "ring", "--allreduce-wire", "bf16"}).find("in f32"),
            std::string::npos);
  EXPECT_TRUE(parse({"--recompute"})->recompute);
  EXPECT_TRUE(parse({"--recompute", "--strategy", "auto"})->recompute);
  EXPECT_NE(error_of({"--recompute", "--tensor-parallel", "2"}).find("without --tensor-parallel"), std::string::npos);
  EXPECT_EQ(error_of({"--optimizer", "lars", "--tensor-parallel", "2"}),
            "--optimizer lars needs whole layers on each rank: it goes without --tensor-parallel");
}

TEST(TrainOptionsParsing, TheOptimizersAndTheScheduleRefuseNumbersThatCannotTrain) {
  // Each of these trained before with no word: backwards (a negative gamma), ever faster (a negative step),
  // never reaching --lr (a warm-up past the run), or as if the option were 0 (NaN momentum).
  const std::pair<std::vector<std::string>, std::string> wrong[] = {
      {{"--lr", "inf"}, "--lr must be a positive number"},
      {{"--optimizer", "sgd", "--momentum", "nan"}, "--momentum must be in [0, 1)"},
      {{"--optimizer", "lars", "--momentum", "1.5"}, "--momentum must be in [0, 1)"},
      {{"--weight-decay", "nan"}, "--weight-decay must be a number >= 0"},
      {{"--weight-decay", "inf"}, "--weight-decay must be a number >= 0"},
      {{"--optimizer", "lars", "--nesterov"}, "--nesterov goes with --optimizer sgd"},
      {{"--lr-schedule", "step", "--lr-gamma", "-1"}, "--lr-gamma must be a positive number"},
      {{"--lr-schedule", "step", "--lr-step-epochs", "0"}, "--lr-step-epochs must be a positive number"},
      {{"--lr-step-epochs", "-1"}, "--lr-step-epochs must be a positive number"},
      {{"--warmup-epochs", "-1"}, "--warmup-epochs must be between 0 and --epochs (10)"},
      {{"--warmup-epochs", "nan"}, "--warmup-epochs must be between 0 and --epochs (10)"},
      {{"--warmup-epochs", "5", "--epochs", "1"}, "--warmup-epochs must be between 0 and --epochs (1)"},
      {{"--lr-schedule", "poly", "--lr-power", "inf"}, "--lr-power must be a positive number"}};
  for (const auto& [args, message] : wrong) EXPECT_EQ(error_of(args).find(message), 0u) << error_of(args);
  EXPECT_TRUE(parse({"--optimizer", "sgd", "--nesterov", "--momentum", "0", "--warmup-epochs", "10"}));
}

TEST(TrainOptionsParsing, LayerwiseOptimizersLeaveBiasesAndBatchNormUndecayedOnARealModel) {
  // seed_cnn_bn as ddl_train builds it: with no gradient, a step of LARS or LAMB with weight decay moves only
  // what they adapt and decay, the convolutions' and dense layers' weights; the biases and BatchNorm's scale
  // and shift stay as they were.
  for (const std::string name : {"lars", "lamb"}) {
    const auto o = parse({"--model", "seed_cnn_bn", "--optimizer", name, "--weight-decay", "0.1", "--lr", "0.1"});
    Context ctx;
    auto model = make_model(o->model, ModelConfig{}, ctx);
    model->initialize(1);
    const std::vector<float> before(model->params().begin(), model->params().end());
    std::fill(model->grads().begin(), model->grads().end(), 0.0f);
    make_optimizer(*o, *model)->step(model->params(), model->grads(), o->lr);
    int decayed = 0, kept = 0;
    for (const auto& e : model->param_entries()) {
      const bool batch_norm = model->layer(e.layer).describe().rfind("batch_norm2d", 0) == 0;
      const bool bias = e.name.ends_with(".bias");
      bool moved = false;
      for (std::size_t i = e.offset; i < e.offset + e.size; ++i) moved = moved || model->params()[i] != before[i];
      if (batch_norm || bias) {
        EXPECT_FALSE(moved) << name << ": " << e.name;
        ++kept;
      } else {
        EXPECT_TRUE(moved) << name << ": " << e.name;
        ++decayed;
      }
    }
    EXPECT_GE(kept, 4) << "the BatchNorm layers' scale and shift, and the biases";
    EXPECT_GE(decayed, 3) << "the convolutions' and dense layers' weights";
  }
}

TEST(TrainOptionsParsing, AStrategyKeepsTheGridOptionsGivenAndRefusesACutOrSplit) {
  const auto o = parse({"--strategy", "auto", "--pipeline-stages", "2"});
  EXPECT_EQ(o->fixed_stages, 2);
  EXPECT_EQ(o->fixed_tensor, 0);
  EXPECT_EQ(o->fixed_micro_batches, 0);
  EXPECT_NE(error_of({"--strategy", "auto", "--partition", "3,4"}).find("chooses the cut and the split layers"),
            std::string::npos);
  EXPECT_NE(error_of({"--replan-every", "5"}).find("--replan-every goes with --strategy auto"), std::string::npos);
  EXPECT_EQ(parse({"--strategy", "data", "--replan-every", "never"})->replan_every, TrainOptions::kNeverReplan);
  EXPECT_EQ(parse({"--strategy", "data", "--replan-every", "7"})->replan_every, 7);
  // data and pipeline name the kind of layout: an axis against it is refused, one that agrees is kept.
  for (const auto* axis : {"--pipeline-stages", "--tensor-parallel"})
    EXPECT_NE(error_of({"--strategy", "data", axis, "2"}).find("--strategy data trains whole replicas"),
              std::string::npos)
        << axis;
  EXPECT_EQ(parse({"--strategy", "data", "--pipeline-stages", "1"})->fixed_stages, 1);
  EXPECT_NE(error_of({"--strategy", "pipeline", "--pipeline-stages", "1"}).find("--strategy pipeline cuts whole"),
            std::string::npos);
  EXPECT_NE(error_of({"--strategy", "pipeline", "--tensor-parallel", "2"}).find("--strategy pipeline cuts whole"),
            std::string::npos);
  EXPECT_EQ(parse({"--strategy", "pipeline", "--pipeline-stages", "4"})->fixed_stages, 4);
}

TEST(TrainOptionsParsing, CheckpointEveryTakesATimeAStepCountOrEpoch) {
  EXPECT_EQ(parse({})->checkpoint_every_seconds, 30 * 60);  // the default: 30 minutes, or each epoch
  EXPECT_EQ(parse({"--checkpoint-every", "90s"})->checkpoint_every_seconds, 90);
  EXPECT_EQ(parse({"--checkpoint-every", "2h"})->checkpoint_every_seconds, 7200);
  const auto steps = parse({"--checkpoint-every", "500steps"});
  EXPECT_EQ(steps->checkpoint_every_steps, 500u);
  EXPECT_EQ(steps->checkpoint_every_seconds, 0);
  const auto epoch = parse({"--checkpoint-every", "epoch"});
  EXPECT_EQ(epoch->checkpoint_every_steps, 0u);
  EXPECT_EQ(epoch->checkpoint_every_seconds, 0);
  for (const char* wrong : {"30", "0min", "-5s", "2.5steps", "10 min", "soon", "1e99s"})
    EXPECT_EQ(error_of({"--checkpoint-every", wrong}),
              std::string("--checkpoint-every takes a time (30min, 90s, 2h), a step count (500steps) or epoch, not '") +
                  wrong + "'")
        << wrong;
}

TEST(TrainOptionsParsing, GlobalBatchStandsForEveryRanksBatch) {
  EXPECT_EQ(parse({"--global-batch", "48"})->global_batch, 48);
  EXPECT_EQ(error_of({"--global-batch", "0"}), "--global-batch must be at least 1");
  EXPECT_EQ(error_of({"--global-batch", "48", "--batch-size", "8"}),
            "--global-batch sets the batch of every rank: give it without --batch-size and --scale-lr");
  // Each rank's share meets the micro-batches once the layout is known (layout_choice_test), not 64.
  EXPECT_TRUE(parse({"--global-batch", "48", "--micro-batches", "3"}).has_value());
}

std::string help_text() {
  testing::internal::CaptureStdout();
  EXPECT_FALSE(parse({"--help"}));
  return testing::internal::GetCapturedStdout();
}

TEST(TrainOptionTable, EveryOptionParsesItsDefaultAndAppearsInTheHelp) {
  const std::string help = help_text();
  const auto defaults = parse({});
  ASSERT_TRUE(defaults);
  EXPECT_EQ(options_given(*defaults), "--train data.h5");
  for (const OptionInfo& option : train_option_list()) {
    EXPECT_NE(help.find("  --" + option.name + " "), std::string::npos) << option.name;
    // --global-batch's default stands for "not given": given, it must be at least 1.
    if (option.flag || option.default_value.empty() || option.name == "train" || option.name == "global-batch")
      continue;
    // --replan-every goes with a strategy.
    const std::vector<std::string> company =
        option.name == "replan-every" ? std::vector<std::string>{"--strategy", "auto"} : std::vector<std::string>{};
    const auto baseline = parse(company);
    std::vector<std::string> args = company;
    args.insert(args.end(), {"--" + option.name, option.default_value});
    const auto o = parse(args);
    ASSERT_TRUE(o && baseline) << option.name;
    EXPECT_EQ(o->describe(), baseline->describe()) << option.name << " " << option.default_value;
    EXPECT_EQ(options_given(*o), options_given(*baseline)) << option.name << " " << option.default_value;
  }
}

TEST(TrainOptionTable, EveryOptionThatTakesAValueRefusesABadOneWithOneLineNamingIt) {
  for (const OptionInfo& option : train_option_list()) {
    // Paths and names take any text; --tensor-split's indices are checked against the model.
    const std::vector<std::string> any_text = {
        "model",        "train",   "val",        "tensor-split", "resume",   "init",          "save-profile",
        "load-profile", "metrics", "mlperf-log", "tensorboard",  "timeline", "checkpoint-dir"};
    if (option.flag || std::find(any_text.begin(), any_text.end(), option.name) != any_text.end()) continue;
    const std::string error = error_of({"--" + option.name, "@bad"});
    EXPECT_NE(error.find("--" + option.name), std::string::npos) << option.name << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << option.name << ": " << error;
  }
  EXPECT_EQ(error_of({"--threads", "65536"}), "--threads must be in [0, 1024]");
  EXPECT_EQ(error_of({"--dropout", "1"}), "--dropout must be below 1");
  EXPECT_EQ(error_of({"--val-crop-fraction", "0"}), "--val-crop-fraction must be in (0, 1]");
  EXPECT_EQ(error_of({"--bucket-mb", "-1"}), "--bucket-mb must be a number >= 0");
  EXPECT_EQ(error_of({"--steps-per-epoch", "-1"}), "--steps-per-epoch must be >= 0");
  EXPECT_EQ(error_of({"--precision", "fp16"}), "--precision must be f32, bf16 or auto, not 'fp16'");
}

// What a checkpoint stores and a resumed run compares: the same keys as before the table (an older
// checkpoint's configuration reads as it did), and each one's value as the option would be given.
TEST(TrainOptionTable, TheDescriptionHoldsTheRunsDefiningOptions) {
  const auto o = parse({"--mean", "0.5,0.25,0.125", "--std", "0.2,0.2,0.2", "--normalize", "meanstd", "--optimizer",
                        "sgd", "--partition", "3,4", "--pipeline-stages", "2", "--shard-state", "1"});
  ASSERT_TRUE(o);
  std::vector<std::string> keys;
  std::istringstream lines(o->describe());
  for (std::string line; std::getline(lines, line);) keys.push_back(line.substr(0, line.find(" ")));
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<std::string> before = {"model",
                                     "num-classes",
                                     "image-size",
                                     "dropout",
                                     "patch-size",
                                     "depth",
                                     "width",
                                     "heads",
                                     "random-resized-crop",
                                     "val-crop-fraction",
                                     "train",
                                     "val",
                                     "val-fraction",
                                     "normalize",
                                     "random-flip",
                                     "random-crop-padding",
                                     "epochs",
                                     "batch-size",
                                     "steps-per-epoch",
                                     "optimizer",
                                     "lr",
                                     "lr-schedule",
                                     "warmup-epochs",
                                     "shard-state",
                                     "recompute",
                                     "lr-step-epochs",
                                     "lr-gamma",
                                     "lr-power",
                                     "momentum",
                                     "lars-trust",
                                     "nesterov",
                                     "weight-decay",
                                     "adam-beta1",
                                     "adam-beta2",
                                     "adam-epsilon",
                                     "seed",
                                     "label-smoothing",
                                     "allreduce",
                                     "allreduce-wire",
                                     "bucket-mb",
                                     "scale-lr",
                                     "pipeline-stages",
                                     "micro-batches",
                                     "partition",
                                     "schedule",
                                     "init",
                                     "precision",
                                     "tensor-parallel",
                                     "tensor-split",
                                     "strategy",
                                     "mean",
                                     "std"};
  std::sort(before.begin(), before.end());
  EXPECT_EQ(keys, before);
  const std::string text = o->describe();
  for (const char* line : {"mean += 0.5\n", "mean += 0.125\n", "std += 0.2\n", "optimizer = sgd\n", "partition = 3,4\n",
                           "shard-state = 1\n", "normalize = meanstd\n", "lr = 0.001\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  EXPECT_EQ(options_given(*o),
            "--train data.h5 --normalize meanstd --mean 0.5,0.25,0.125 --std 0.2,0.2,0.2 --optimizer sgd "
            "--shard-state 1 --pipeline-stages 2 --partition 3,4");
  // A number at 1 over a default of 0 is a value, not a flag.
  EXPECT_EQ(options_given(*parse({"--threads", "1", "--recompute"})), "--train data.h5 --threads 1 --recompute");
}

TEST(ChangedOptions, NamesWhatAResumedRunChangedButItsEpochs) {
  const auto before = parse({"--lr", "0.001", "--epochs", "2"}), after = parse({"--lr", "0.01", "--epochs", "5"});
  EXPECT_EQ(changed_options(before->describe(), after->describe()), "lr 0.001 -> 0.01");
  EXPECT_EQ(changed_options(before->describe(), before->describe()), "");
}

}  // namespace
}  // namespace ddl
