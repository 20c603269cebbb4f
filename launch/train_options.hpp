// Everything ddl_train can be told, parsed from the command line and optionally a config file
// (--config, "key = value" lines with the long option names; the command line wins).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/allreduce.hpp"
#include "core/optim/lr_schedule.hpp"
#include "core/plan/layout.hpp"
#include "core/plan/profile.hpp"
#include "core/train/pipeline_schedule.hpp"

namespace ddl {

// The words of ddl_train's word-valued options, as values (option_word gives each one's word).
enum class OptimizerKind { adam, sgd, lars, lamb };
enum class Normalization { scale, meanstd, imagenet };  // imagenet: meanstd with ImageNet's mean and std
enum class CorruptImages { refuse, skip };
enum class CacheImages { automatic, on, off };
enum class Precision { f32, bf16, automatic };  // bf16: convolutions and dense layers in bf16, the rest f32
enum class Progress { automatic, always, never };
enum class OnDivergence { stop, resync };  // resync: copy replica 0's parameters and optimizer state
enum class Strategy { manual, automatic, data, pipeline };

struct TrainOptions {
  // model
  std::string model = "seed_cnn";
  int num_classes = 0;  // 0: the training set's class count
  int image_size = 0;   // 0 here and below: the model's own value
  float dropout = -1.0f;
  int patch_size = 0, depth = 0, width = 0, heads = 0;  // vision transformers
  // data
  std::string train_path, val_path;
  double val_fraction = 0.0;
  Normalization normalize = Normalization::scale;
  std::vector<float> mean, stddev;  // empty: the training set's statistics
  bool random_flip = false;
  int random_crop_padding = 0;
  bool random_resized_crop = false;
  // Encoded datasets (JPEG files): decoding threads a rank (0: the cores the compute threads leave, at least
  // one), the evaluation's centre crop of the shorter side, and whether a corrupt image is skipped.
  int loader_threads = 0;
  float val_crop_fraction = 0.875f;
  CorruptImages corrupt_images = CorruptImages::refuse;
  int prefetch_batches = 3;               // the loader's batches ready ahead of the step: its memory
  // training
  int epochs = 10;
  int batch_size = 64;
  // --global-batch: images per step over all ranks, kept whatever the rank count (0: --batch-size a rank).
  int global_batch = 0;
  int steps_per_epoch = 0;  // 0: the whole training set
  // The images per step over `ranks` ranks that all bring their own (a strategy's count).
  int global_batch_on(int ranks) const { return global_batch > 0 ? global_batch : batch_size * ranks; }
  OptimizerKind optimizer = OptimizerKind::adam;
  float lr = 1e-3f;
  LrPolicy lr_policy = LrPolicy::constant;  // --lr-schedule
  float warmup_epochs = 0.0f;
  float lr_step_epochs = 30.0f;
  float lr_gamma = 0.1f;
  float lr_power = 2.0f;
  float momentum = 0.9f;
  float lars_trust = 0.001f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  float adam_beta1 = 0.9f, adam_beta2 = 0.999f, adam_epsilon = 1e-7f;
  float label_smoothing = 0.0f;
  // Validation every this many epochs and after the last; the run ends at the first that reaches the target
  // accuracy (0: none).
  int eval_every = 1;
  double target_accuracy = 0;
  std::uint64_t seed = 1;
  // system
  int threads = 0;                 // 0: this node's cores shared among its ranks
  CacheImages cache_images = CacheImages::automatic;  // the training images kept in memory
  Precision precision = Precision::f32;
  AllreduceAlgorithm allreduce_algorithm = AllreduceAlgorithm::hierarchical;  // --allreduce ring | hier | mpi
  WireType allreduce_wire = WireType::f32;                                    // bf16: ring only
  // The gradients' all-reduce as the two options above set it (the ring's chunk as it is by default).
  AllreduceOptions allreduce() const { return {allreduce_algorithm, allreduce_wire}; }
  double bucket_mb = 0.0;  // 0: one all-reduce after backward; > 0: buckets overlapped with backward
  // --shard-state: ZeRO's stage (0: none), or auto: none unless the planner shards.
  static constexpr int kShardStateAuto = -1;
  int shard_state = kShardStateAuto;
  bool recompute = false;  // --recompute: activations dropped in forward, computed again in backward
  bool scale_lr = false;   // multiply --lr by the number of ranks (Goyal et al.)
  // --timeout: seconds one wait for other ranks may last (0: no limit); nullopt: auto (comm/wait_limits.hpp).
  std::optional<double> timeout_seconds;
  int check_replicas = 100;               // steps between checks that replicas hold the same parameters; 0: never
  OnDivergence on_divergence = OnDivergence::stop;
  // pipeline
  int pipeline_stages = 1;
  int micro_batches = 1;
  std::vector<std::size_t> partition;  // layers per stage; empty: balanced by measurement
  PipelineSchedule pipeline_schedule = PipelineSchedule::one_f_one_b;  // --schedule gpipe | 1f1b
  // split layers (ranks = replicas x stages x tensor-parallel)
  int tensor_parallel = 1;
  std::string tensor_split = "classifier";  // classifier | blocks | layer indices, e.g. 9,11
  // planner (core/plan): the layout chosen from a profile measured at start
  Strategy strategy = Strategy::manual;
  double memory_limit_gb = 0;       // per rank; 0: the node's memory shared among its ranks, less 10%
  bool plan_only = false;           // print the plan and stop
  int plan_for_ranks = 0, plan_for_per_node = 0;  // plan another cluster (--plan-for R[,P]); 0: this one
  std::string save_profile, load_profile;
  // --pipeline-stages, --tensor-parallel and --micro-batches given with a strategy: the search keeps them (0: free).
  int fixed_stages = 0, fixed_tensor = 0, fixed_micro_batches = 0;
  Link link_within{5e-6, 5e9}, link_between{50e-6, 1.25e9};  // where they cannot be measured
  // --replan-every: steps between re-plans during training; kReplanEachEpoch (the default) or kNeverReplan.
  int replan_every = 0;
  static constexpr int kReplanEachEpoch = 0, kNeverReplan = -1;
  // output
  std::string checkpoint_dir;
  // --checkpoint-every: last.h5 also between an epoch's steps, by time or by steps (0: not by that).
  double checkpoint_every_seconds = 30 * 60;
  std::uint64_t checkpoint_every_steps = 0;
  std::string resume;        // a checkpoint path
  bool resume_auto = false;  // --resume auto: <checkpoint-dir>/last.h5 where there is one
  std::string init;    // a checkpoint whose weights a fresh run starts from
  std::string metrics_path;
  std::string mlperf_log;       // MLPerf's :::MLLOG lines (mlperf_log.hpp)
  std::string tensorboard_dir;  // event files for TensorBoard (tensorboard_log.hpp)
  int tensorboard_every = 10;   // steps between two per-step scalars
  std::string timeline_path;  // Chrome trace of every rank's spans
  Progress progress = Progress::automatic;
  bool profile = false;

  // The settings that define the run (not where it writes), "key = value" a line: stored in checkpoints
  // and fingerprinted to check that every rank was started the same way.
  std::string describe() const;
  // The same for the run in `layout`: under a strategy, the planner's grid, micro-batches, cut, split and
  // batch stand where a user would have given them.
  std::string describe(const Layout& layout) const;
  double bucket_bytes() const { return bucket_mb * (1 << 20); }
  // LARS and LAMB: their trust ratios need each layer's whole weights on a rank.
  bool layerwise_optimizer() const { return optimizer == OptimizerKind::lars || optimizer == OptimizerKind::lamb; }
  // Why the optimizer's state of this run cannot be sharded ("" where it can).
  std::string shard_state_refusal() const;
};

// The word an option takes for this value ("hier", "cosine", "1f1b").
const char* option_word(AllreduceAlgorithm algorithm);
const char* option_word(LrPolicy policy);
const char* option_word(PipelineSchedule schedule);
const char* option_word(OptimizerKind optimizer);
const char* option_word(Normalization normalize);
const char* option_word(Precision precision);
const char* option_word(Strategy strategy);
const char* option_word(WireType wire);

// The options as given, "--name value" for each one off its default (flags by their name alone), for the
// run's header.
std::string options_given(const TrainOptions& o);
// One option of ddl_train as its table defines it, in --help's order (--help and --config aside).
struct OptionInfo {
  std::string name, group, default_value;
  bool flag = false, described = false;
};
std::vector<OptionInfo> train_option_list();

// Returns nullopt after printing --help. Throws InputError on bad options.
std::optional<TrainOptions> parse_train_options(int argc, char** argv);

}  // namespace ddl
