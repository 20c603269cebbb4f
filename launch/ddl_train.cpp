// ddl_train: trains a registered model on an HDF5 image dataset, on one process or, under mpirun, as a
// grid of ranks: D data-parallel replicas (averaging gradients every step) of an S-stage pipeline (each
// stage a contiguous run of layers on its own rank). This file wires the pieces together and is the error
// boundary: set-up errors are agreed on by all ranks and end every rank with exit code 2; errors during
// training abort the whole job with the failing rank's message.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <map>
#include <numeric>
#include <optional>

#include "comm/allreduce.hpp"
#include "comm/communicator.hpp"
#include "comm/hang_detector.hpp"
#include "comm/mpi_environment.hpp"
#include "comm/mpi_replica_group.hpp"
#include "comm/mpi_stage_link.hpp"
#include "comm/mpi_tensor_group.hpp"
#include "comm/replica_check.hpp"
#include "comm/stop_vote.hpp"
#include "core/checksum.hpp"
#include "core/cpu_bf16.hpp"
#include "core/data/hdf5.hpp"
#include "core/data/sampler.hpp"
#include "core/error.hpp"
#include "core/layers/param_slice.hpp"
#include "core/rng.hpp"
#include "core/train/checkpoint.hpp"
#include "core/train/directory_lock.hpp"
#include "core/train/resources.hpp"
#include "core/train/trainer.hpp"
#include "launch/error_line.hpp"
#include "launch/metrics_log.hpp"
#include "launch/progress_bar.hpp"
#include "launch/plan_profile.hpp"
#include "launch/replanner.hpp"
#include "launch/stage_partition.hpp"
#include "launch/stop_signals.hpp"
#include "launch/strategy.hpp"
#include "launch/tensor_split.hpp"
#include "launch/thread_count.hpp"
#include "launch/train_options.hpp"
#include "launch/trained_model.hpp"
#include "models/registry.hpp"

namespace ddl {
namespace {

// "3 nodes: host1 x2, host2 x2, host3 x2" on rank 0 when the job spans several hosts (empty otherwise), so
// that a launch across nodes can be checked from its output.
std::string describe_nodes(const Communicator& world) {
  char name[256] = "?";
  gethostname(name, sizeof name - 1);
  const auto names = world.gather(name, 0);
  std::vector<std::pair<std::string, int>> hosts;
  for (const auto& n : names) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == n; });
    if (it == hosts.end()) hosts.emplace_back(n, 1);
    else ++it->second;
  }
  if (hosts.size() < 2) return "";
  std::string text = std::to_string(hosts.size()) + " nodes:";
  for (std::size_t i = 0; i < hosts.size(); ++i)
    text += (i ? ", " : " ") + hosts[i].first + " x" + std::to_string(hosts[i].second);
  return text;
}

std::vector<std::size_t> every_index(std::size_t n) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::string image_shape(const ImageDataset& ds) {
  return std::to_string(ds.height()) + "x" + std::to_string(ds.width()) + "x" + std::to_string(ds.channels());
}

template <typename T>
std::vector<T> select(const std::vector<T>& from, const std::vector<std::size_t>& positions) {
  std::vector<T> out;
  out.reserve(positions.size());
  for (auto p : positions) out.push_back(from[p]);
  return out;
}

// World rank = (replica * stages + stage) * tensor + t: the ranks that split a stage's layers are
// neighbours (they exchange activations at every split layer), then a replica's stages, on one node when
// the node has room for them.
struct Grid {
  int replicas = 1, stages = 1, tensor = 1;  // D x S x T
  int replica = 0, stage = 0, t = 0;
  bool gathers_batch = false;  // split dense layers gather the group's images; split blocks share them
  Grid(int ranks, int rank, int pipeline_stages, int tensor_parallel) : stages(pipeline_stages), tensor(tensor_parallel) {
    if (ranks % (stages * tensor) != 0)
      throw InputError(std::to_string(ranks) + " ranks do not form a grid of replicas x " + std::to_string(stages) +
                       " pipeline stages x " + std::to_string(tensor) +
                       " tensor-parallel ranks (the rank count must be a multiple of --pipeline-stages times "
                       "--tensor-parallel)");
    replicas = ranks / (stages * tensor);
    replica = rank / (stages * tensor);
    stage = rank / tensor % stages;
    t = rank % tensor;
  }
  // Where each rank of a tensor group trains on its own images (split dense layers gather them), the
  // training data is dealt among D x T ranks; where the group shares a batch, among the D replicas.
  int data_rank() const { return gathers_batch ? replica * tensor + t : replica; }
  int data_ranks() const { return gathers_batch ? replicas * tensor : replicas; }
};

// Everything a run holds, built before the first step.
struct Run {
  TrainOptions options;
  std::string resume_path;
  Context ctx;
  Grid grid{1, 0, 1, 1};
  // The stages of this replica (of this rank's tensor index); the replicas of this stage (likewise); the
  // ranks that split this stage's layers; every rank of this replica (checkpoints are written in turn).
  std::optional<Communicator> pipeline, stage_replicas, tensor, replica_ranks;
  std::optional<MpiTensorGroup> tensor_group;  // with --tensor-parallel > 1
  std::vector<std::size_t> split_layers;
  std::string split_report;
  std::string plan_report;      // --strategy other than manual
  double predicted_step_s = 0, predicted_comm_share = 0;  // by the plan
  std::optional<Replanner> replanner;  // a planned run that re-plans (--replan-every)
  bool layout_chosen = false;          // by the re-plan that moved the run here: build() plans nothing
  std::optional<Switch> next_layout;   // the re-plan's choice: train() returns kSwitchLayout
  std::vector<char> switch_image;      // the run's checkpoint in memory, on every rank, for the next layout
  std::string switch_note;             // the re-plan's reason, in place of the header
  unsigned long long steps_run = 0;    // training steps of this process, over every layout
  std::vector<std::size_t> partition;                    // layers per stage
  std::string partition_report;
  std::optional<BatchLoader> train_loader, val_loader;   // on the first stage only
  std::vector<std::size_t> train_subset, val_subset;     // dataset indices used for training / validation
  std::unique_ptr<Model> model;                          // the whole model, or this rank's stage
  std::vector<std::unique_ptr<Model>> model_copies;      // sharing its parameters: micro-batches in flight
  StepPlan plan;
  std::unique_ptr<Optimizer> optimizer;
  LrSchedule schedule;
  TrainingState state;
  std::string init_note;  // what --init did, for rank 0's header
  std::string cache_note;  // --cache-images: what was kept in memory, or why not
  double cache_bytes = 0;   // of training images to keep in memory (the planner leaves them room)
  std::shared_ptr<const ImageCache> image_cache;  // kept across a re-plan's move
  // On rank 0, when there is a checkpoint folder; held across a move to another layout.
  std::unique_ptr<DirectoryLock> checkpoint_lock;
  Timeline timeline;  // --timeline: every layout's events
  int threads = 1;
  std::string nodes;  // describe_nodes()
};

// Runs `step`, which one rank may fail alone (its files), and makes every rank fail with it: the ranks must
// not part before the collectives that follow, which a failed rank would never join.
template <typename Step>
void on_every_rank(const Communicator& world, const std::string& what, Step step) {
  std::string failure;
  try {
    step();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (world.any(!failure.empty())) throw InputError(failure.empty() ? what + " failed on another rank" : failure);
}

// --strategy auto | data | pipeline: the profile (measured on these ranks, or --load-profile), the plan,
// and the options that build the chosen layout, which every rank must agree on.
void choose_layout(Run& run, const Communicator& world, const ModelConfig& config, std::size_t model_layers) {
  TrainOptions& o = run.options;
  MeasuredProfile measured;
  if (!o.load_profile.empty()) {
    on_every_rank(world, "--load-profile", [&] {
      std::ifstream in(o.load_profile);
      if (!in) throw InputError("--load-profile: cannot read " + o.load_profile);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      measured.profile = profile_from_text(text, o.load_profile);
      if (measured.profile.model != o.model)
        throw InputError("--load-profile " + o.load_profile + " profiles model " + measured.profile.model + ", not " +
                         o.model);
      if (measured.profile.layers.size() != model_layers)
        throw InputError("--load-profile " + o.load_profile + " holds " + std::to_string(measured.profile.layers.size()) +
                         " layers, model " + o.model + " has " + std::to_string(model_layers));
    });
    measured.links = "profile and links from " + o.load_profile;
  } else {
    measured = measure_profile(o, config, world, run.ctx);
  }
  on_every_rank(world, "--save-profile", [&] {
    if (o.save_profile.empty() || world.rank() != 0) return;
    std::ofstream out(o.save_profile);
    out << to_text(measured.profile);
    out.close();
    if (!out) throw InputError("--save-profile: cannot write " + o.save_profile);
  });
  std::vector<double> per_node{static_cast<double>(world.split_shared().size())};
  world.allreduce_max(per_node);
  const int this_per_node = static_cast<int>(per_node[0]);
  const Cluster cluster{o.plan_for_ranks > 0 ? o.plan_for_ranks : world.size(),
                        o.plan_for_per_node > 0 ? o.plan_for_per_node
                                                : std::min(this_per_node, o.plan_for_ranks > 0 ? o.plan_for_ranks
                                                                                              : world.size())};
  // The smallest node's share: every rank must plan with the same limit.
  std::vector<double> limit{o.memory_limit_gb > 0 ? o.memory_limit_gb * 1e9
                                                  : default_memory_limit(cluster.ranks_per_node)};
  world.allreduce_min(limit);
  limit[0] -= run.cache_bytes;  // the training images kept in memory
  StrategyPlan plan = plan_strategy(o, measured.profile, cluster, limit[0]);
  run.plan_report = plan.report + "  " + measured.links + "\n";
  run.predicted_step_s = plan.chosen.prediction.step_s;
  run.predicted_comm_share = plan.chosen.prediction.comm_share();
  if (o.plan_only) return;
  if (o.replan_every != TrainOptions::kNeverReplan && world.size() > 1)
    run.replanner.emplace(o, measured.profile, cluster, limit[0], plan.chosen.layout);
  o = plan.options;
  world.check_same("the plan (the layout chosen by --strategy " + o.strategy + ")", Checksum().add(o.describe()).value());
}

// --cache-images: the bytes of training images to keep in memory, 0 for none. Every first-stage rank holds
// every training image, since each epoch deals them out to the replicas anew (the other stages read none).
// auto: where the whole file's images take at most a quarter of a rank's share of the node's memory, the
// smallest node's, so that every rank decides alike. Collective over `world`.
double images_to_keep_in_memory(Run& run, const Communicator& world, const ImageDataset& train) {
  const TrainOptions& o = run.options;
  if (o.cache_images == "off") return 0;
  const double bytes = static_cast<double>(train.size()) * static_cast<double>(train.image_bytes());
  std::vector<double> share{o.memory_limit_gb > 0 ? o.memory_limit_gb * 1e9
                                                  : default_memory_limit(world.split_shared().size())};
  world.allreduce_min(share);
  if (o.cache_images == "auto" && !(bytes <= share[0] / 4)) {
    run.cache_note = "training images read from the file every step (" + std::to_string(static_cast<long long>(bytes / 1e6)) +
                     " MB do not fit in a quarter of a rank's memory share; --cache-images on to keep them in memory)";
    return 0;
  }
  return bytes;
}

// Reads the training images into memory, or takes those the previous layout read (a re-plan's move). A
// rank that reads none before a move reads none after it: the other ranks would wait for it in a collective
// under the training's time limit. Collective over `world`.
void keep_training_images_in_memory(Run& run, const Communicator& world) {
  if (run.cache_bytes == 0) return;
  on_every_rank(world, "reading the training images into memory", [&] {
    if (!run.train_loader) return run.image_cache.reset();
    if (run.image_cache) return run.train_loader->keep_in_memory(run.image_cache);
    if (run.layout_chosen) return;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      run.image_cache = run.train_loader->keep_in_memory(run.train_subset);
    } catch (const std::bad_alloc&) {
      throw InputError("--cache-images: no memory for the " + std::to_string(static_cast<long long>(run.cache_bytes / 1e6)) +
                       " MB of training images (--cache-images off reads them from the file every step)");
    }
    char note[160];
    std::snprintf(note, sizeof note, "training images in memory: %zu (%.0f MB) read in %.2f s",
                  run.image_cache->images(), static_cast<double>(run.image_cache->bytes()) / 1e6,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    run.cache_note = note;
  });
}

void build(Run& run, const Communicator& world) {
  const TrainOptions& o = run.options;  // the planner may change the layout's options below
  run.threads = o.threads > 0 ? o.threads : default_threads(world.split_shared().size());
  omp_set_num_threads(run.threads);
  run.nodes = describe_nodes(world);
  // What one rank may fail alone (its CPU, its files) is checked before the collectives that follow.
  std::optional<ImageDataset> train_set;
  ModelConfig config;
  std::unique_ptr<Model> whole;  // not finalized: only its layer count and input shape
  on_every_rank(world, "setting up", [&] {
    if (o.precision == "bf16" && !cpu_computes_bf16())
      throw InputError("--precision bf16: this CPU has neither AVX512-BF16 nor AMX (oneDNN would emulate bf16, "
                       "slower than f32): train with --precision f32");
    if (o.precision == "bf16") run.ctx.set_compute_type(dt::bf16);
    for (const auto& [option, path] : {std::pair{"--train", o.train_path}, std::pair{"--val", o.val_path}})
      if (!path.empty() && std::filesystem::is_directory(path))
        throw InputError(std::string(option) + " " + path + " is a folder: import its images first (ddl_data import "
                         "--from " + path + " --output data.h5) and give the .h5 file");
    const ImageDataset& train = train_set.emplace(o.train_path);
    config = {.num_classes = o.num_classes > 0 ? o.num_classes : static_cast<int>(train.num_classes()),
              .seed = o.seed,
              .image_size = o.image_size,
              .dropout = o.dropout,
              .patch_size = o.patch_size,
              .depth = o.depth,
              .width = o.width,
              .heads = o.heads};
    if (static_cast<std::size_t>(config.num_classes) < train.num_classes())
      throw InputError(o.train_path + " has " + std::to_string(train.num_classes()) + " classes but --num-classes is " +
                       std::to_string(config.num_classes));
    whole = define_model(o.model, config);
    const dims_t in = whole->input_shape();
    if (o.image_size > 0 && in[1] != o.image_size)
      throw InputError("model " + o.model + " takes " + std::to_string(in[1]) + "x" + std::to_string(in[2]) +
                       " images; --image-size does not apply to it");
    if (train.channels() != in[0])
      throw InputError("model " + o.model + " takes " + std::to_string(in[0]) + "-channel images, " + o.train_path +
                       " holds " + image_shape(train));
  });
  if (o.precision == "auto") {
    // bf16 only where every rank's CPU computes it: replicas must compute alike.
    double without_bf16[1] = {cpu_computes_bf16() ? 0.0 : 1.0};
    world.allreduce_sum(without_bf16);
    if (without_bf16[0] == 0.0) run.ctx.set_compute_type(dt::bf16);
  }
  const ImageDataset& train = *train_set;
  const std::size_t layers = whole->num_layers();
  const dims_t in = whole->input_shape();
  run.cache_bytes = images_to_keep_in_memory(run, world, train);
  if (o.strategy != "manual" && !run.layout_chosen) {
    choose_layout(run, world, config, layers);
    if (o.plan_only) return;
  }
  const Grid& g = run.grid = Grid(world.size(), world.rank(), o.pipeline_stages, o.tensor_parallel);
  run.pipeline.emplace(world.split(g.replica * g.tensor + g.t, g.stage));
  run.stage_replicas.emplace(world.split(g.stage * g.tensor + g.t, g.replica));
  run.tensor.emplace(world.split(g.replica * g.stages + g.stage, g.t));
  run.replica_ranks.emplace(world.split(g.replica, g.stage * g.tensor + g.t));
  run.pipeline->watch(world.hang_detector(), "the stages of replica " + std::to_string(g.replica));
  run.stage_replicas->watch(world.hang_detector(), "the replicas of stage " + std::to_string(g.stage));
  run.tensor->watch(world.hang_detector(), "the ranks that split stage " + std::to_string(g.stage) + "'s layers");
  run.replica_ranks->watch(world.hang_detector(), "the ranks of replica " + std::to_string(g.replica));
  if (g.tensor > 1) run.tensor_group.emplace(*run.tensor);
  const bool first_stage = run.grid.stage == 0;
  LayerSplit split;
  if (g.tensor > 1) {
    TensorSplitChoice choice = choose_tensor_split(o.tensor_split, *whole, g.tensor);
    run.split_layers = choice.layers;
    run.split_report = std::move(choice.report);
    run.grid.gathers_batch = choice.gathers_batch;
    split = {run.split_layers, &*run.tensor_group};
  }
  StagePartition partition = choose_partition(o, config, layers, g.stage, *run.pipeline, world, run.ctx);
  run.partition = std::move(partition.counts);
  run.partition_report = std::move(partition.report);
  const LayerRange range = stage_range(run.partition, g.stage);
  run.model = make_model(o.model, config, run.ctx, range, nullptr, split);
  run.model->initialize(o.seed);
  run.plan = {o.micro_batches, o.pipeline_schedule, static_cast<std::size_t>(o.batch_size)};
  for (int c = 1; c < Trainer::slots_needed(run.plan, g.stage, g.stages); ++c)
    run.model_copies.push_back(make_model(o.model, config, run.ctx, range, run.model.get(), split));

  // Images of another size than the model's input are resampled by the loader.
  Preprocessing prep;
  prep.out_height = static_cast<int>(in[1]);
  prep.out_width = static_cast<int>(in[2]);
  prep.random_flip = o.random_flip;
  prep.random_crop_padding = o.random_crop_padding;
  prep.random_resized_crop = o.random_resized_crop;
  if (o.normalize == "imagenet") {
    prep.normalize_mean_std = true;
    prep.mean = kImageNetMean;
    prep.stddev = kImageNetStd;
  } else if (o.normalize == "meanstd") {
    prep.normalize_mean_std = true;
    prep.mean = o.mean.empty() ? std::vector<float>(train.channel_mean().begin(), train.channel_mean().end()) : o.mean;
    prep.stddev =
        o.stddev.empty() ? std::vector<float>(train.channel_std().begin(), train.channel_std().end()) : o.stddev;
  }
  prep.type = run.model->input_type(run.ctx);
  if (first_stage) run.train_loader.emplace(o.train_path, prep, static_cast<std::size_t>(o.batch_size), run.ctx);

  // Validation: a separate file, or a seeded fraction held out of the training file.
  run.train_subset = every_index(train.size());
  Preprocessing eval_prep = prep;
  eval_prep.random_flip = false;
  eval_prep.random_crop_padding = 0;
  eval_prep.random_resized_crop = false;
  if (!o.val_path.empty()) {
    if (first_stage) run.val_loader.emplace(o.val_path, eval_prep, static_cast<std::size_t>(o.batch_size), run.ctx);
    const ImageDataset val(o.val_path);
    if (val.height() != train.height() || val.width() != train.width() || val.channels() != train.channels())
      throw InputError(o.val_path + ": images are " + image_shape(val) + ", the training set's " + image_shape(train));
    if (val.class_names() != train.class_names())
      throw InputError(o.val_path + ": class names differ from the training set's");
    run.val_subset = every_index(val.size());
  } else if (o.val_fraction > 0) {
    const auto order = epoch_permutation(train.size(), o.seed ^ 0x7a11d, 0);
    const auto n_val = static_cast<std::size_t>(o.val_fraction * static_cast<double>(train.size()));
    if (n_val == 0) throw InputError("--val-fraction leaves no validation images");
    run.val_subset.assign(order.begin(), order.begin() + n_val);
    run.train_subset.assign(order.begin() + n_val, order.end());
    if (first_stage) run.val_loader.emplace(o.train_path, eval_prep, static_cast<std::size_t>(o.batch_size), run.ctx);
  }
  const std::size_t global_batch = static_cast<std::size_t>(o.batch_size) * static_cast<std::size_t>(g.data_ranks());
  if (run.train_subset.size() < global_batch)
    throw InputError("the training set has " + std::to_string(run.train_subset.size()) +
                     " images, fewer than one global batch of " + std::to_string(global_batch));


  const auto n = run.model->param_count();
  run.optimizer = make_optimizer(o, n);
  // --scale-lr multiplies by the global batch over the batch given: under a strategy, the ranks.
  const int scale = o.strategy == "manual" ? g.data_ranks() : world.size();
  const float lr = o.scale_lr ? o.lr * static_cast<float>(scale) : o.lr;
  run.schedule = {o.lr_policy, lr, o.warmup_epochs, o.lr_step_epochs, o.lr_gamma, static_cast<float>(o.epochs)};

  keep_training_images_in_memory(run, world);

  run.state.model_name = o.model;
  run.state.seed = o.seed;
  run.state.configuration = o.describe();
  run.state.class_names = train.class_names();
  run.state.input_mean.assign(prep.mean.begin(), prep.mean.end());
  run.state.input_std.assign(prep.stddev.begin(), prep.stddev.end());
  // Last, after every collective of the set-up: a check that only rank 0 makes must not leave the other
  // ranks in a collective that rank 0 never joins (they all agree on set-up errors after this).
  if (world.rank() == 0 && !o.metrics_path.empty()) {
    const auto folder = std::filesystem::path(o.metrics_path).parent_path();
    if (!folder.empty() && !std::filesystem::is_directory(folder))
      throw InputError("--metrics " + o.metrics_path + ": there is no folder " + folder.string());
  }
  if (!o.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec) throw InputError("--checkpoint-dir " + o.checkpoint_dir + ": " + ec.message());
    if (world.rank() == 0 && !run.checkpoint_lock) run.checkpoint_lock = std::make_unique<DirectoryLock>(o.checkpoint_dir);
  }
}

void print_profile(const Profiler& profiler, double train_seconds, std::size_t steps) {
  std::printf("profile (per training step, %zu steps):\n  %-34s %10s %10s %7s\n", steps, "layer", "fwd ms", "bwd ms",
              "share");
  double layers = 0;
  for (const auto& e : profiler.entries()) layers += e.forward_s + e.backward_s;
  for (const auto& e : profiler.entries())
    std::printf("  %-34s %10.3f %10.3f %6.1f%%\n", e.layer.c_str(), 1e3 * e.forward_s / steps,
                1e3 * e.backward_s / steps, 100.0 * (e.forward_s + e.backward_s) / train_seconds);
  std::printf("  %-34s %21.3f %6.1f%%\n", "other (loss, optimizer, data wait)", 1e3 * (train_seconds - layers) / steps,
              100.0 * (train_seconds - layers) / train_seconds);
}

// Below a split layer that gathers its group's batch, each rank of the group kept its own BatchNorm
// statistics, from its own images; evaluation runs the same images on every rank of the group and a
// checkpoint keeps one rank's, so the group takes its first rank's first, as if one model had run.
void share_group_state(Run& run) {
  if (!run.tensor_group) return;
  for (const StateView& s : run.model->state())
    if (!s.floats.empty()) run.tensor->broadcast(s.floats, 0);
}

// One checkpoint file from the first replica's ranks, written in turn, stage after stage and within a
// stage rank after rank of its tensor group (checkpoint.hpp).
// keep_previous: the file `path` held stays as previous_checkpoint(path) (for last.h5).
void save(Run& run, const std::string& path, bool keep_previous) {
  if (run.grid.replica != 0) return;
  const Communicator& writers = *run.replica_ranks;
  for (int turn = 0; turn < writers.size(); ++turn) {
    if (turn == writers.rank()) {
      write_checkpoint_part(path, *run.model, *run.optimizer, run.state, {turn == 0, run.grid.t == 0});
      if (turn + 1 == writers.size()) publish_checkpoint(path, keep_previous);
    }
    writers.barrier();
  }
}

// What a resumed run does differently from the run that wrote its checkpoint ("lr 0.001 -> 0.01, ..."):
// allowed (a lower learning rate, more epochs), but said, since it is no longer the same run.
std::string changed_options(const std::string& before, const std::string& now) {
  const auto was = configuration_values(before), is = configuration_values(now);
  std::string changed;
  for (const auto& [key, value] : is) {
    const auto it = was.find(key);
    if (key == "epochs" || it == was.end() || it->second == value) continue;
    changed += (changed.empty() ? "" : ", ") + key + " " + it->second + " -> " + value;
  }
  return changed;
}

void print_header(Run& run, const Communicator& world) {
  const TrainOptions& o = run.options;
  const Grid& g = run.grid;
  if (!run.switch_note.empty())
    std::printf("%s\n", run.switch_note.c_str());
  else if (g.stages == 1)
    std::cout << run.model->summary(run.ctx);
  else
    std::printf("model %s in %d pipeline stages:\n%s", o.model.c_str(), g.stages, run.partition_report.c_str());
  if (g.tensor > 1)
    std::printf("ranks %d in a grid %d x %d x %d (replicas x stages x tensor-parallel), threads per rank %d, batch %d "
                "per %s (global %d)",
                world.size(), g.replicas, g.stages, g.tensor, run.threads, o.batch_size,
                g.gathers_batch ? "rank" : "tensor group", o.batch_size * g.data_ranks());
  else if (g.stages == 1)
    std::printf("ranks %d, threads per rank %d, batch %d per rank (global %d)", world.size(), run.threads,
                o.batch_size, o.batch_size * g.replicas);
  else
    std::printf("ranks %d in a grid %d x %d (replicas x stages), threads per rank %d, batch %d per replica (global %d)",
                world.size(), g.replicas, g.stages, run.threads, o.batch_size, o.batch_size * g.replicas);
  if (o.micro_batches > 1 || g.stages > 1)
    std::printf(" in %d micro-batches (%s)", o.micro_batches, o.schedule.c_str());
  std::printf(", %zu training / %zu validation images\n", run.train_subset.size(), run.val_subset.size());
  if (!run.nodes.empty()) std::printf("%s\n", run.nodes.c_str());
  if (!run.split_report.empty()) std::printf("%s\n", run.split_report.c_str());
  if (!run.plan_report.empty()) std::printf("%s", run.plan_report.c_str());
  if (!run.switch_note.empty()) {
    std::fflush(stdout);
    return;
  }
  const ImageDataset& data = run.train_loader->dataset();
  const dims_t& in = run.model->input_shape();
  if (data.height() != in[1] || data.width() != in[2])
    std::printf("%s images resampled to %ldx%ld (bilinear)\n", image_shape(data).c_str(), static_cast<long>(in[1]),
                static_cast<long>(in[2]));
  std::printf("optimizer %s, schedule %s\n", run.optimizer->describe().c_str(), run.schedule.describe().c_str());
  if (o.precision == "auto" && run.ctx.compute_type() == dt::f32)
    std::printf("precision auto: f32 (a CPU of this run has neither AVX512-BF16 nor AMX)\n");
  if (run.ctx.compute_type() == dt::bf16)
    std::printf("precision bf16: convolutions, dense layers and matrix products multiply in bf16 and accumulate in "
                "f32; activations bf16 between the layers that take it; weights, gradients, optimizer and loss f32\n");
  if (g.replicas > 1 && o.bucket_mb > 0 && g.stages == 1 && g.tensor == 1)
    std::printf("gradients: %s all-reduce, %s wire, buckets of %g MB during backward\n", o.allreduce.c_str(),
                o.allreduce_wire.c_str(), o.bucket_mb);
  else if (g.replicas > 1)
    std::printf("gradients: %s all-reduce, %s wire, one piece after backward\n", o.allreduce.c_str(),
                o.allreduce_wire.c_str());
  if (o.num_classes > 0 && static_cast<std::size_t>(o.num_classes) > data.num_classes())
    std::printf("note: --num-classes %d, but %s has %zu classes: the model's other outputs are never a right answer\n",
                o.num_classes, o.train_path.c_str(), data.num_classes());
  if (!run.resume_path.empty()) {
    std::printf("resumed from %s after epoch %llu%s\n", run.resume_path.c_str(),
                static_cast<unsigned long long>(run.state.epochs_done),
                run.state.steps_done ? (" and " + std::to_string(run.state.steps_done) + " steps of the next").c_str()
                                     : "");
    const std::string changed = changed_options(run.state.configuration, o.describe());
    if (!changed.empty()) std::printf("options changed since the checkpoint: %s\n", changed.c_str());
    if (!o.init.empty()) std::printf("--init %s not used: the run resumed instead\n", o.init.c_str());
  }
  if (!run.init_note.empty()) std::printf("%s\n", run.init_note.c_str());
  if (!run.cache_note.empty()) std::printf("%s\n", run.cache_note.c_str());
  std::fflush(stdout);
}

// One Chrome trace file for the whole job, written by rank 0.
void write_timeline(const Run& run, const Timeline& timeline, const Communicator& world) {
  const std::string label = "rank " + std::to_string(world.rank()) + " (replica " +
                            std::to_string(run.grid.replica) + ", stage " + std::to_string(run.grid.stage) +
                            (run.grid.tensor > 1 ? ", tensor rank " + std::to_string(run.grid.t) : "") + ")";
  const auto texts = world.gather(timeline.json_events(world.rank(), label), 0);
  if (world.rank() != 0) return;
  const std::string& path = run.options.timeline_path;
  std::ofstream out(path);
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (std::size_t r = 0; r < texts.size(); ++r) out << (r ? ",\n" : "") << texts[r];
  out << "\n]}\n";
  out.close();
  if (!out) throw Error("cannot write the timeline to " + path);
  std::printf("timeline of %zu ranks in %s%s\n", texts.size(), path.c_str(),
              timeline.dropped() ? " (rank 0 kept only its first events)" : "");
}

// The one rank that speaks for the job.
bool world_rank_zero(const Run& run) {
  return run.grid.replica == 0 && run.grid.stage == 0 && run.grid.t == 0;
}

// After SIGINT or SIGTERM (Slurm's pre-emption): every rank stopped after the same step; the checkpoint
// records how far the run got (`steps` of the epoch, 0 at an epoch's end), so --resume continues it
// exactly. Exit code 128 + the signal, as a shell reports a process ended by it.
int stop_midway(Run& run, const PassMetrics& tr, int epoch, std::size_t steps, int signal) {
  const TrainOptions& o = run.options;
  run.state.epochs_done = static_cast<std::uint64_t>(epoch);
  const std::string last = (std::filesystem::path(o.checkpoint_dir) / "last.h5").string();
  if (!o.checkpoint_dir.empty() && run.state.steps_done > 0) save(run, last, true);
  if (world_rank_zero(run)) {
    if (run.state.steps_done > 0)
      std::printf("stopped by a signal in epoch %d at step %llu/%zu (train loss %.4f over its last %zu steps)",
                  epoch + 1, static_cast<unsigned long long>(run.state.steps_done), steps, tr.loss, tr.steps);
    else
      std::printf("stopped by a signal after epoch %d", epoch);
    if (o.checkpoint_dir.empty())
      std::printf("; nothing saved (no --checkpoint-dir)\n");
    else
      std::printf("; %s holds it: continue with --resume auto\n", last.c_str());
    std::fflush(stdout);
  }
  return 128 + (signal != 0 ? signal : SIGTERM);
}

void report(const Communicator* world, const std::string& message) { print_error_line("ddl_train", world, message); }

// A failure during training: its message goes out first, then the whole job ends at once. Unwinding the
// communication objects first could wait forever for ranks that are not coming (the bucket thread's
// all-reduce that a peer left), and a peer waiting for this rank is in a collective only an abort ends.
[[noreturn]] void fail_during_training(const Communicator& world, std::exception_ptr error) {
  report(&world, describe_exception(error));
  abort_all_ranks(1);
}

// A loaded checkpoint's state becomes the run's, but for what this run's data says (build() set it; a
// checkpoint of an older format has no class names).
void take_loaded_state(Run& run, TrainingState loaded) {
  loaded.class_names = std::move(run.state.class_names);
  loaded.input_mean = std::move(run.state.input_mean);
  loaded.input_std = std::move(run.state.input_std);
  run.state = std::move(loaded);
}

// --resume: every rank loads its part of the checkpoint, and the ranks agree whether all could. With
// auto, a damaged last.h5 (a flipped bit, a copy cut short) gives way to the one before it, said in one
// line. Returns false, each failing rank having printed its error, when none loads.
bool resume(Run& run, const Communicator& world) {
  const TrainOptions& o = run.options;
  std::vector<std::string> candidates;
  if (o.resume == "auto") {
    const std::string last = (std::filesystem::path(o.checkpoint_dir) / "last.h5").string();
    for (const auto& path : {last, previous_checkpoint(last)})
      if (std::filesystem::exists(path)) candidates.push_back(path);
  } else if (!o.resume.empty()) {
    candidates.push_back(o.resume);
  }
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    std::exception_ptr error;
    try {
      take_loaded_state(run, load_checkpoint(candidates[i], *run.model, run.optimizer.get()));
    } catch (...) {
      error = std::current_exception();
    }
    const bool any_failed = world.any(error != nullptr);
    if (!any_failed) {
      run.resume_path = candidates[i];
      break;
    }
    if (i + 1 == candidates.size()) {
      if (error) report(&world, describe_exception(error));
      return false;
    }
    if (world.rank() == 0) {
      std::fprintf(stderr, "ddl_train: %s; resuming from %s instead\n",
                   error ? describe_exception(error).c_str() : (candidates[i] + " cannot be read on every rank").c_str(),
                   candidates[i + 1].c_str());
      std::fflush(stderr);
    }
  }
  if (!run.resume_path.empty() && run.state.seed != o.seed) {
    report(&world, run.resume_path + " was written with --seed " + std::to_string(run.state.seed) +
                       "; resume with the same seed to continue the same run");
    return false;
  }
  return true;
}

// --init, in a run that did not resume: the weights and BatchNorm statistics of a checkpoint of the same
// model (ddl_train's, or launch/import_torch.py's), matched by name. The classifier, when the class count
// differs, keeps its fresh initialisation, and rank 0 says so; any other parameter of another size there
// (another --image-size) is an error. Returns false, each failing rank having printed its error, when the
// checkpoint cannot be used.
bool initialize(Run& run, const Communicator& world) {
  const std::string& path = run.options.init;
  if (path.empty() || !run.resume_path.empty()) return true;
  std::exception_ptr error;
  std::string fresh;  // this rank's classifier parameters, when they keep their initialisation
  int source_classes = 0;
  bool other_normalisation = false;
  try {
    Context ctx;
    const TrainedModel source = load_trained_model(path, ctx);
    if (source.model->name() != run.model->name())
      throw InputError("--init " + path + ": weights of model " + source.model->name() + ", not of --model " +
                       run.model->name());
    source_classes = source.model->num_classes();
    // Within float's precision: a run keeps its normalisation in float, an imported file in double.
    auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
      return a.size() == b.size() &&
             std::equal(a.begin(), a.end(), b.begin(), [](double x, double y) { return std::abs(x - y) < 1e-6; });
    };
    other_normalisation =
        !same(source.state.input_mean, run.state.input_mean) || !same(source.state.input_std, run.state.input_std);
    const std::size_t classifier = run.model->whole_layer_count() - 1;
    std::map<std::string, std::span<const float>> values;
    const std::span<const float> from = source.model->params();
    for (const auto& e : source.model->param_entries()) values[e.name] = from.subspan(e.offset, e.size);
    for (const auto& s : source.model->state()) values[s.name] = s.floats;
    const std::span<float> to = run.model->params();
    for (const auto& e : run.model->param_entries()) {
      const auto it = values.find(e.name);
      if (it != values.end() && it->second.size() == whole_size(e.spec))
        take_slice(it->second, e.spec, to.subspan(e.offset, e.size));
      else if (run.model->first_layer() + e.layer == classifier && source_classes != run.model->num_classes())
        fresh += (fresh.empty() ? "" : ", ") + e.name;
      else
        throw InputError("--init " + path + ": " + e.name + " holds " +
                         std::to_string(it == values.end() ? 0 : it->second.size()) + " values there, " +
                         std::to_string(whole_size(e.spec)) + " here (trained with another --image-size or shape?)");
    }
    for (const auto& s : run.model->state()) {
      const auto it = values.find(s.name);
      if (!s.floats.empty() && it != values.end() && it->second.size() == s.floats.size())
        std::copy(it->second.begin(), it->second.end(), s.floats.begin());
    }
  } catch (...) {
    error = std::current_exception();
  }
  if (world.any(error != nullptr)) {
    if (error) report(&world, describe_exception(error));
    return false;
  }
  // The classifier lives on the last stage: rank 0 learns from the others what they kept fresh.
  std::string all_fresh;
  for (const auto& part : world.gather(fresh, 0))
    if (!part.empty() && all_fresh.empty()) all_fresh = part;  // every replica of the last stage says the same
  run.init_note = "initialised from " + path;
  if (!all_fresh.empty())
    run.init_note += "; " + all_fresh + " start afresh (its classifier is for " + std::to_string(source_classes) +
                     " classes, this run's for " + std::to_string(run.model->num_classes()) + ")";
  if (other_normalisation)
    run.init_note += "\nnote: " + path + " was trained on inputs normalised otherwise than this run's (--normalize)";
  return true;
}

// The values every replica of a stage must hold alike: the parameters, and with the optimizer's state
// (momentum, Adam's moments: derived from averaged gradients). Not the layers' state: BatchNorm's
// running statistics come from each replica's own images.
std::vector<NamedValues> replica_values(Run& run, bool with_optimizer) {
  std::vector<NamedValues> values;
  const std::span<const float> params = run.model->params();
  for (const auto& e : run.model->param_entries()) values.push_back({e.name, params.subspan(e.offset, e.size), {}});
  if (with_optimizer)
    for (const auto& s : run.optimizer->state()) values.push_back({"optimizer " + s.name, s.floats, s.words});
  return values;
}

// Stops the job, or with --on-divergence resync copies replica 0's parameters and optimizer state to the
// others and says so. Collective over the stage's replicas.
void check_replicas(Run& run, const std::string& when, bool with_optimizer) {
  const Communicator& replicas = *run.stage_replicas;
  if (replicas.size() == 1) return;
  const std::string difference = replica_difference(replicas, replica_values(run, with_optimizer));
  if (difference.empty()) return;
  if (run.options.on_divergence == "stop")
    throw Error("replicas diverged " + when + ": " + difference +
                " (a non-deterministic kernel, or faulty memory or network on a node; --on-divergence resync copies "
                "replica 0's state and goes on)");
  replicas.broadcast(run.model->params(), 0);
  for (const auto& s : run.optimizer->state()) {
    replicas.broadcast(s.floats, 0);
    replicas.broadcast(s.words, 0);
  }
  if (replicas.rank() == 0) {
    std::fprintf(stderr, "ddl_train: replicas diverged %s: %s; copied rank %d's parameters and optimizer state to "
                 "them (--on-divergence resync)\n", when.c_str(), difference.c_str(), replicas.world_rank(0));
    std::fflush(stderr);
  }
}

// A test's way to make one replica drift: DDL_TEST_PERTURB=RANK:STEP adds 1 to that world rank's first
// parameter after that training step (counted over the whole run).
struct Perturbation {
  int rank = -1;
  unsigned long long step = 0;
  static Perturbation from_environment() {
    Perturbation p;
    if (const char* text = std::getenv("DDL_TEST_PERTURB"))
      if (std::sscanf(text, "%d:%llu", &p.rank, &p.step) != 2) p.rank = -1;
    return p;
  }
};

// What train() returns when a re-plan chose another layout: main() builds it and goes on.
constexpr int kSwitchLayout = -1;

// Collective over every rank, at a step boundary.
void consider_replan(Run& run, const Communicator& world, const Profiler& profiler) {
  world.hang_detector()->set_phase("re-planning");
  std::optional<Switch> next = run.replanner->replan(world, profiler, run.model->first_layer(), run.steps_run);
  world.check_same("the re-plan's decision", Checksum().add(next ? next->plan.options.describe() : "keep").value());
  run.next_layout = std::move(next);
  world.hang_detector()->set_phase("training");
}

// The run's checkpoint, written in memory by the first replica's ranks in turn (each passing the image on
// to the next), then handed to every rank: the state the next layout's ranks take their slices from.
int pack_for_next_layout(Run& run, const Communicator& world) {
  world.hang_detector()->set_phase("moving to another layout");
  std::vector<char> image;
  if (run.grid.replica == 0) {
    const Communicator& writers = *run.replica_ranks;
    for (int turn = 0; turn < writers.size(); ++turn) {
      if (turn == writers.rank())
        write_checkpoint_image_part(image, *run.model, *run.optimizer, run.state, {turn == 0, run.grid.t == 0});
      writers.broadcast(image, turn);
    }
  }
  world.broadcast(image, 0);  // world rank 0 is the first replica's
  run.switch_image = std::move(image);
  return kSwitchLayout;
}

int train(Run& run, const Communicator& world, StopSignals& stop_signals) {
  const TrainOptions& o = run.options;
  const Grid& g = run.grid;
  const bool lead = world.rank() == 0;
  // The communication thread of buckets and the pipeline's messages (or a split layer's collectives) would
  // call MPI from two threads at once, which MPI_THREAD_SERIALIZED forbids: such a run averages its
  // gradients after the step.
  const double bucket_mb = g.stages > 1 || g.tensor > 1 ? 0.0 : o.bucket_mb;
  MpiReplicaGroup group(*run.stage_replicas,
                        {o.allreduce_algorithm, o.allreduce_wire == "bf16" ? WireType::bf16 : WireType::f32},
                        static_cast<std::size_t>(bucket_mb * (1 << 20)));
  world.check_same("the configuration (options, model)",
                   Checksum().add(o.describe() + run.model->name()).value() ^ run.model->whole_param_count());
  group.broadcast(run.model->params(), 0);
  std::optional<MpiStageLink> link;
  if (g.stages > 1) link.emplace(*run.pipeline);

  if (lead) print_header(run, world);
  if (run.state.epochs_done >= static_cast<std::uint64_t>(o.epochs) && run.state.steps_done == 0) {
    if (lead)
      std::printf("nothing to train: %s holds %llu epochs, and --epochs %d counts all epochs, resumed ones too\n",
                  run.resume_path.c_str(), static_cast<unsigned long long>(run.state.epochs_done), o.epochs);
    return 0;
  }
  std::vector<Model*> copies{run.model.get()};
  for (auto& c : run.model_copies) copies.push_back(c.get());
  Profiler profiler;  // every micro-batch's copy adds to it
  if (o.profile || run.replanner)
    for (Model* m : copies) m->attach_profiler(&profiler);
  Trainer trainer(run.ctx, copies, *run.optimizer, run.schedule, group, link ? &*link : nullptr, run.plan,
                  run.tensor_group ? &*run.tensor_group : nullptr);
  std::optional<MetricsLog> metrics;
  if (lead && !o.metrics_path.empty()) metrics.emplace(o.metrics_path, !run.resume_path.empty() || run.layout_chosen);
  // Open MPI hands its ranks a pseudo-terminal even when mpirun's own output goes to a file, so under
  // mpirun "auto" cannot tell and stays with plain lines; --progress always forces the bar. A pipeline's
  // first stage does not see the loss, so it shows no bar.
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  const bool bar = lead && g.stages == 1 &&
                   (o.progress == "always" || (o.progress == "auto" && isatty(STDOUT_FILENO) && !under_mpirun));
  const bool validate = !run.val_subset.empty();
  HangDetector& hang = *world.hang_detector();
  const Perturbation perturb = Perturbation::from_environment();
  unsigned long long& steps_run = run.steps_run;
  // A re-planning run times its steps; the first one of a layout builds its primitives and is left out.
  std::chrono::steady_clock::time_point step_began;
  bool first_step_of_layout = true;
  stop_signals.arm();
  const std::atomic<int>& stop_signal = stop_signals.received();
  StopVote stop_vote(world);
  try {
    if (!o.timeline_path.empty()) trainer.record(&run.timeline);
    auto finish = [&](int code) {
      if (!o.timeline_path.empty()) write_timeline(run, run.timeline, world);
      return code;
    };

    PassMetrics last_val;
    double train_seconds = 0;
    std::size_t train_steps = 0;
    for (auto epoch = static_cast<int>(run.state.epochs_done); epoch < o.epochs; ++epoch) {
      auto indices =
          training_indices(run.train_subset.size(), o.seed, epoch, g.data_rank(), g.data_ranks(), o.batch_size);
      if (o.steps_per_epoch > 0)
        indices.resize(std::min(indices.size(), static_cast<std::size_t>(o.steps_per_epoch) * o.batch_size));
      const std::size_t steps = indices.size() / o.batch_size;
      // A run stopped in the middle of an epoch resumes at the step after the last one it finished.
      const std::size_t first_step = static_cast<std::uint64_t>(epoch) == run.state.epochs_done ? run.state.steps_done : 0;
      indices.erase(indices.begin(), indices.begin() + static_cast<std::ptrdiff_t>(first_step * o.batch_size));
      if (run.train_loader) run.train_loader->start(select(run.train_subset, indices), true, o.seed, epoch, first_step);
      ProgressBar progress(epoch + 1, o.epochs);
      group.take_stats();
      if (link) link->take_wait_seconds();
      if (run.tensor_group) run.tensor_group->take_bytes_sent();
      std::size_t step_in_epoch = first_step;
      EpochHooks hooks;
      if (bar) hooks.progress = [&](const StepProgress& p) { progress.update(p); };
      hooks.stop = [&] {
        hang.step_done();
        ++steps_run;
        if (perturb.rank == world.rank() && perturb.step == steps_run) run.model->params()[0] += 1.0f;
        if (o.check_replicas > 0 && steps_run % static_cast<unsigned>(o.check_replicas) == 0)
          check_replicas(run, "after step " + std::to_string(steps_run), false);
        if (run.replanner) {
          if (first_step_of_layout)
            run.replanner->begin_measuring(profiler, steps_run);
          else
            run.replanner->step_took(std::chrono::duration<double>(std::chrono::steady_clock::now() - step_began).count());
          first_step_of_layout = false;
        }
        const bool stop = stop_vote.step(stop_signal.load() != 0);
        const bool last_of_run = ++step_in_epoch == steps && epoch + 1 == o.epochs;  // nothing left to move
        if (!stop && !last_of_run && run.replanner && run.replanner->due(steps_run))
          consider_replan(run, world, profiler);
        step_began = std::chrono::steady_clock::now();
        return stop || run.next_layout.has_value();
      };
      hang.set_phase("training");
      step_began = std::chrono::steady_clock::now();
      const PassMetrics tr =
          trainer.train_epoch(run.train_loader ? &*run.train_loader : nullptr, epoch, steps, first_step, hooks);
      if (bar) progress.finish();
      // A signal that came late in the epoch (or during the last step) stops the run at the epoch's end.
      const bool stop = world.any(stop_vote.finish() || stop_signal.load() != 0);
      if (first_step + tr.steps < steps) {
        run.state.steps_done = first_step + tr.steps;
        if (run.next_layout && !stop) return pack_for_next_layout(run, world);
        return finish(stop_midway(run, tr, epoch, steps, stop_signal.load()));
      }
      run.state.steps_done = 0;
      // The slowest rank's wait is what the step pays for communication; a pipeline's idle share is the
      // mean over its stages.
      const auto comm = group.take_stats();
      // Each rank's share of its own epoch: a rank that entered the epoch early (while rank 0 still wrote a
      // checkpoint) waits longer than rank 0's epoch lasted, which once showed as 113.7%.
      double comm_share[1] = {tr.seconds > 0 ? comm.wait_seconds / tr.seconds : 0.0};
      world.allreduce_max(comm_share);
      double bytes[1] = {comm.bytes / g.replicas};  // every stage's share, counted once per replica
      world.allreduce_sum(bytes);
      double pipeline_wait[1] = {link ? link->take_wait_seconds() / world.size() : 0.0};
      world.allreduce_sum(pipeline_wait);
      // What one rank sent to its tensor group (activations, labels, gradients of the layers below the
      // gather), the busiest rank's.
      double tensor_bytes[1] = {run.tensor_group ? run.tensor_group->take_bytes_sent() : 0.0};
      world.allreduce_max(tensor_bytes);
      train_seconds += tr.seconds;
      train_steps += tr.steps;
      PassMetrics val;
      hang.set_phase("evaluation");
      share_group_state(run);
      if (validate) {
        const auto mine = evaluation_indices(run.val_subset.size(), g.replica, g.replicas);
        if (run.val_loader) run.val_loader->start(select(run.val_subset, mine), false, o.seed, epoch);
        val = trainer.evaluate(run.val_loader ? &*run.val_loader : nullptr, mine.size());
        last_val = val;
      }
      double peak_mb[1] = {static_cast<double>(peak_resident_bytes()) / (1 << 20)};
      world.allreduce_max(peak_mb);
      run.state.epochs_done = static_cast<std::uint64_t>(epoch + 1);
      const bool best = validate && val.accuracy > run.state.best_accuracy;
      if (best) run.state.best_accuracy = val.accuracy;
      hang.set_phase("checkpoint");
      if (!o.checkpoint_dir.empty()) {
        check_replicas(run, "by the end of epoch " + std::to_string(epoch + 1), true);
        const std::filesystem::path dir(o.checkpoint_dir);
        save(run, (dir / "last.h5").string(), true);
        if (best) save(run, (dir / "best.h5").string(), false);
        world.barrier();  // the ranks that write nothing wait here, in the checkpoint phase's time limit
      }
      if (lead) {
        const double step_seconds = tr.seconds / static_cast<double>(std::max<std::size_t>(tr.steps, 1));
        std::printf("epoch %d/%d  train loss %.4f acc %.4f", epoch + 1, o.epochs, tr.loss, tr.accuracy);
        if (validate) std::printf("  val loss %.4f acc %.4f", val.loss, val.accuracy);
        std::printf("  time %.2f s  %.0f img/s  lr %.3g  peak RSS %.0f MB%s", tr.seconds, tr.images_per_second(),
                    trainer.last_lr(), peak_mb[0], world.size() > 1 ? " (largest rank)" : "");
        if (g.replicas > 1)
          std::printf("  comm wait %.1f%%  %.2f MB all-reduced/step", 100.0 * comm_share[0],
                      bytes[0] / static_cast<double>(std::max<std::size_t>(tr.steps, 1)) / (1 << 20));
        if (link) std::printf("  pipeline wait %.1f%%", 100.0 * pipeline_wait[0] / tr.seconds);
        if (run.tensor_group)
          std::printf("  tensor group %.0f bytes/step sent per rank",
                      tensor_bytes[0] / static_cast<double>(std::max<std::size_t>(tr.steps, 1)));
        if (run.predicted_step_s > 0) std::printf("  step %.3f s (planned %.3f s)", step_seconds, run.predicted_step_s);
        std::printf("\n");
        std::fflush(stdout);
        if (metrics)
          metrics->write({epoch + 1, tr.loss, tr.accuracy, val.loss, val.accuracy, tr.seconds, tr.images_per_second(),
                          trainer.last_lr(), peak_mb[0], comm_share[0], pipeline_wait[0] / tr.seconds, step_seconds,
                          run.predicted_step_s, run.predicted_comm_share});
      }
      if (stop) return finish(stop_midway(run, tr, epoch + 1, 0, stop_signal.load()));
      if (!run.next_layout && run.replanner && o.replan_every == TrainOptions::kReplanEachEpoch && epoch + 1 < o.epochs)
        consider_replan(run, world, profiler);
      if (run.next_layout) return pack_for_next_layout(run, world);
    }
    const auto peaks = world.allgather(peak_resident_bytes());
    if (lead) {
      if (world.size() > 1) {
        std::printf("peak RSS by rank (MB):");
        for (auto p : peaks) std::printf(" %.0f", static_cast<double>(p) / (1 << 20));
        std::printf("\n");
      }
      if (o.profile && train_steps) print_profile(profiler, train_seconds, train_steps);
      if (validate && last_val.images > 0)
        std::printf("final validation accuracy %.4f (best %.4f)\n", last_val.accuracy, run.state.best_accuracy);
    }
    world.barrier();
    return finish(0);
  } catch (...) {
    fail_during_training(world, std::current_exception());
  }
}

// The re-plan's layout, built as a run of its own (the previous one's memory, communicators, loaders and
// checkpoint lock released first), and the state in memory read back into it: the training goes on at the
// step after the last one done, with the same global batch.
void move_to_next_layout(std::optional<Run>& run, const Communicator& world) {
  Switch next = std::move(*run->next_layout);
  Replanner replanner = std::move(*run->replanner);
  const std::vector<char> image = std::move(run->switch_image);
  const unsigned long long steps_run = run->steps_run;
  std::unique_ptr<DirectoryLock> lock = std::move(run->checkpoint_lock);  // no other job takes the folder meanwhile
  Timeline timeline = std::move(run->timeline);
  std::shared_ptr<const ImageCache> images = std::move(run->image_cache);
  run.reset();
  Run& r = run.emplace();
  r.options = next.plan.options;
  r.layout_chosen = true;
  r.replanner.emplace(std::move(replanner));
  r.steps_run = steps_run;
  r.checkpoint_lock = std::move(lock);
  r.timeline = std::move(timeline);
  r.image_cache = std::move(images);
  r.switch_note = next.reason;
  r.plan_report = next.plan.report;
  r.predicted_step_s = next.plan.chosen.prediction.step_s;
  r.predicted_comm_share = next.plan.chosen.prediction.comm_share();
  build(r, world);
  take_loaded_state(r, load_checkpoint_image(image, *r.model, r.optimizer.get()));
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  using namespace ddl;
  StopSignals stop_signals;  // before any thread starts
  h5::no_cleanup_at_exit();
  MpiEnvironment mpi(&argc, &argv);
  std::optional<Communicator> world;
  std::optional<HangDetector> hang;
  std::optional<Run> run;
  // Set-up: every rank learns whether any rank failed, so all stop together with exit code 2.
  std::exception_ptr setup_error;
  try {
    world.emplace();
    auto options = parse_train_options(argc, argv);
    if (!options) return world->any(false) ? 2 : 0;
    hang.emplace(WaitLimits(options->timeout_seconds), "rank " + std::to_string(world->rank()),
                 &stop_signals.received());
    world->watch(&*hang, "all ranks");
    run.emplace();
    run->options = *options;
    build(*run, *world);
  } catch (...) {
    setup_error = std::current_exception();
  }
  if (!world) {
    report(nullptr, describe_exception(setup_error));
    abort_all_ranks(2);
  }
  try {
    if (world->any(setup_error != nullptr)) {
      if (setup_error) report(&*world, describe_exception(setup_error));
      return 2;
    }
    if (run->options.plan_only) {
      if (world->rank() == 0) std::printf("%s", run->plan_report.c_str());
      return 0;
    }
    if (!resume(*run, *world) || !initialize(*run, *world)) return 2;
    int code = train(*run, *world, stop_signals);
    while (code == kSwitchLayout) {
      move_to_next_layout(run, *world);
      code = train(*run, *world, stop_signals);
    }
    return code;
  } catch (...) {
    fail_during_training(*world, std::current_exception());
  }
}
