// ddl_train: trains a registered model on an HDF5 image dataset, on one process or, under mpirun, as
// data-parallel replicas that average gradients every step. This file wires the pieces together and is
// the error boundary: set-up errors are agreed on by all ranks and end every rank with exit code 2;
// errors during training abort the whole job with the failing rank's message.
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>
#include <thread>

#include "comm/allreduce.hpp"
#include "comm/communicator.hpp"
#include "comm/mpi_environment.hpp"
#include "comm/mpi_replica_group.hpp"
#include "core/data/sampler.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/train/checkpoint.hpp"
#include "core/train/resources.hpp"
#include "core/train/trainer.hpp"
#include "launch/metrics_log.hpp"
#include "launch/progress_bar.hpp"
#include "launch/train_options.hpp"
#include "models/registry.hpp"

namespace ddl {
namespace {

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Cores this process may run on, shared among the ranks of its node.
int default_threads(const Communicator& world) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int local_ranks = world.split_shared().size();
  const int share = std::max(1, cores / local_ranks);
  return allowed > 0 ? std::min(allowed, share) : share;
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

// Everything a run holds, built before the first step.
struct Run {
  TrainOptions options;
  std::string resume_path;
  Context ctx;
  std::optional<BatchLoader> train_loader, val_loader;
  std::vector<std::size_t> train_subset, val_subset;  // dataset indices used for training / validation
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  LrSchedule schedule;
  TrainingState state;
  int threads = 1;
};

void build(Run& run, const Communicator& world) {
  const TrainOptions& o = run.options;
  run.threads = o.threads > 0 ? o.threads : default_threads(world);
  omp_set_num_threads(run.threads);

  const ImageDataset train(o.train_path);
  const ModelConfig config{.num_classes = o.num_classes > 0 ? o.num_classes : static_cast<int>(train.num_classes()),
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
  run.model = make_model(o.model, config, run.ctx);
  const dims_t& in = run.model->input_shape();
  if (train.channels() != in[0])
    throw InputError("model " + o.model + " takes " + std::to_string(in[0]) + "-channel images, " + o.train_path +
                     " holds " + image_shape(train));
  run.model->initialize(o.seed);

  // Images of another size than the model's input are resampled by the loader.
  Preprocessing prep;
  prep.out_height = static_cast<int>(in[1]);
  prep.out_width = static_cast<int>(in[2]);
  prep.random_flip = o.random_flip;
  prep.random_crop_padding = o.random_crop_padding;
  prep.random_resized_crop = o.random_resized_crop;
  if (o.normalize == "imagenet") {
    // seeds/002's (and torchvision's) ImageNet statistics.
    prep.normalize_mean_std = true;
    prep.mean = {0.485f, 0.456f, 0.406f};
    prep.stddev = {0.229f, 0.224f, 0.225f};
  } else if (o.normalize == "meanstd") {
    prep.normalize_mean_std = true;
    prep.mean = o.mean.empty() ? std::vector<float>(train.channel_mean().begin(), train.channel_mean().end()) : o.mean;
    prep.stddev =
        o.stddev.empty() ? std::vector<float>(train.channel_std().begin(), train.channel_std().end()) : o.stddev;
  }
  run.train_loader.emplace(o.train_path, prep, static_cast<std::size_t>(o.batch_size), run.ctx);

  // Validation: a separate file, or a seeded fraction held out of the training file.
  run.train_subset = every_index(train.size());
  Preprocessing eval_prep = prep;
  eval_prep.random_flip = false;
  eval_prep.random_crop_padding = 0;
  eval_prep.random_resized_crop = false;
  if (!o.val_path.empty()) {
    run.val_loader.emplace(o.val_path, eval_prep, static_cast<std::size_t>(o.batch_size), run.ctx);
    const ImageDataset& val = run.val_loader->dataset();
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
    run.val_loader.emplace(o.train_path, eval_prep, static_cast<std::size_t>(o.batch_size), run.ctx);
  }
  const std::size_t global_batch = static_cast<std::size_t>(o.batch_size) * static_cast<std::size_t>(world.size());
  if (run.train_subset.size() < global_batch)
    throw InputError("the training set has " + std::to_string(run.train_subset.size()) +
                     " images, fewer than one global batch of " + std::to_string(global_batch));


  const auto n = run.model->param_count();
  if (o.optimizer == "adam")
    run.optimizer = make_adam(n, {o.adam_beta1, o.adam_beta2, o.adam_epsilon, o.weight_decay});
  else
    run.optimizer = make_sgd(n, {o.momentum, o.nesterov, o.weight_decay});
  const float lr = o.scale_lr ? o.lr * static_cast<float>(world.size()) : o.lr;
  run.schedule = {o.lr_policy, lr, o.warmup_epochs, o.lr_step_epochs, o.lr_gamma, static_cast<float>(o.epochs)};

  run.state = {o.model, 0, -1.0, o.seed, o.describe()};
  run.resume_path = o.resume == "auto" ? (std::filesystem::path(o.checkpoint_dir) / "last.h5").string() : o.resume;
  if (o.resume == "auto" && !std::filesystem::exists(run.resume_path)) run.resume_path.clear();
  if (!run.resume_path.empty()) {
    run.state = load_checkpoint(run.resume_path, *run.model, run.optimizer.get());
    if (run.state.seed != o.seed)
      throw InputError(run.resume_path + " was written with --seed " + std::to_string(run.state.seed) +
                       "; resume with the same seed to continue the same run");
  }
  if (!o.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec) throw InputError("--checkpoint-dir " + o.checkpoint_dir + ": " + ec.message());
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

int train(Run& run, const Communicator& world) {
  const TrainOptions& o = run.options;
  const bool lead = world.rank() == 0;
  MpiReplicaGroup group(world, {o.allreduce_algorithm, o.allreduce_wire == "bf16" ? WireType::bf16 : WireType::f32},
                        static_cast<std::size_t>(o.bucket_mb * (1 << 20)));
  group.check_same("the configuration (options, model)",
                   fnv1a(o.describe() + run.model->name()) ^ run.model->param_count());
  group.broadcast(run.model->params(), 0);

  if (lead) {
    std::cout << run.model->summary(run.ctx);
    std::printf("ranks %d, threads per rank %d, batch %d per rank (global %d), %zu training / %zu validation images\n",
                world.size(), run.threads, o.batch_size, o.batch_size * world.size(), run.train_subset.size(),
                run.val_subset.size());
    const ImageDataset& data = run.train_loader->dataset();
    const dims_t& in = run.model->input_shape();
    if (data.height() != in[1] || data.width() != in[2])
      std::printf("%s images resampled to %ldx%ld (bilinear)\n", image_shape(data).c_str(), static_cast<long>(in[1]),
                  static_cast<long>(in[2]));
    std::printf("optimizer %s, schedule %s\n", run.optimizer->describe().c_str(), run.schedule.describe().c_str());
    if (world.size() > 1 && o.bucket_mb > 0)
      std::printf("gradients: %s all-reduce, %s wire, buckets of %g MB during backward\n", o.allreduce.c_str(),
                  o.allreduce_wire.c_str(), o.bucket_mb);
    else if (world.size() > 1)
      std::printf("gradients: %s all-reduce, %s wire, one piece after backward\n", o.allreduce.c_str(),
                  o.allreduce_wire.c_str());
    if (!run.resume_path.empty())
      std::printf("resumed from %s after epoch %llu\n", run.resume_path.c_str(),
                  static_cast<unsigned long long>(run.state.epochs_done));
    std::fflush(stdout);
  }
  Profiler profiler;
  if (o.profile) run.model->attach_profiler(&profiler);
  Trainer trainer(run.ctx, *run.model, *run.optimizer, run.schedule, group);
  std::optional<MetricsLog> metrics;
  if (lead && !o.metrics_path.empty()) metrics.emplace(o.metrics_path, !run.resume_path.empty());
  // Open MPI hands its ranks a pseudo-terminal even when mpirun's own output goes to a file, so under
  // mpirun "auto" cannot tell and stays with plain lines; --progress always forces the bar.
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  const bool bar = lead && (o.progress == "always" || (o.progress == "auto" && isatty(STDOUT_FILENO) && !under_mpirun));

  PassMetrics last_val;
  double train_seconds = 0;
  std::size_t train_steps = 0;
  for (auto epoch = static_cast<int>(run.state.epochs_done); epoch < o.epochs; ++epoch) {
    auto indices = training_indices(run.train_subset.size(), o.seed, epoch, world.rank(), world.size(), o.batch_size);
    if (o.steps_per_epoch > 0)
      indices.resize(std::min(indices.size(), static_cast<std::size_t>(o.steps_per_epoch) * o.batch_size));
    const std::size_t steps = indices.size() / o.batch_size;
    run.train_loader->start(select(run.train_subset, indices), true, o.seed, epoch);
    ProgressBar progress(epoch + 1, o.epochs);
    group.take_stats();
    const PassMetrics tr = trainer.train_epoch(
        *run.train_loader, epoch, steps,
        bar ? [&](const StepProgress& p) { progress.update(p); } : std::function<void(const StepProgress&)>());
    if (bar) progress.finish();
    // The slowest rank's wait is what the step pays for communication.
    const auto comm = group.take_stats();
    double waits[1] = {comm.wait_seconds};
    world.allreduce_max(waits);
    train_seconds += tr.seconds;
    train_steps += steps;
    PassMetrics val;
    if (run.val_loader) {
      run.val_loader->start(
          select(run.val_subset, evaluation_indices(run.val_subset.size(), world.rank(), world.size())), false, o.seed,
          epoch);
      val = trainer.evaluate(*run.val_loader);
      last_val = val;
    }
    const double peak_mb = static_cast<double>(peak_resident_bytes()) / (1 << 20);
    run.state.epochs_done = static_cast<std::uint64_t>(epoch + 1);
    const bool best = run.val_loader && val.accuracy > run.state.best_accuracy;
    if (best) run.state.best_accuracy = val.accuracy;
    if (!lead) continue;
    std::printf("epoch %d/%d  train loss %.4f acc %.4f", epoch + 1, o.epochs, tr.loss, tr.accuracy);
    if (run.val_loader) std::printf("  val loss %.4f acc %.4f", val.loss, val.accuracy);
    std::printf("  time %.2f s  %.0f img/s  lr %.3g  peak RSS %.0f MB", tr.seconds, tr.images_per_second(),
                trainer.last_lr(), peak_mb);
    if (world.size() > 1)
      std::printf("  comm wait %.1f%%  %.2f MB all-reduced/step", 100.0 * waits[0] / tr.seconds,
                  comm.bytes / static_cast<double>(std::max<std::size_t>(steps, 1)) / (1 << 20));
    std::printf("\n");
    std::fflush(stdout);
    if (metrics)
      metrics->write({epoch + 1, tr.loss, tr.accuracy, val.loss, val.accuracy, tr.seconds, tr.images_per_second(),
                      trainer.last_lr(), peak_mb});
    if (!o.checkpoint_dir.empty()) {
      const std::filesystem::path dir(o.checkpoint_dir);
      save_checkpoint((dir / "last.h5").string(), *run.model, *run.optimizer, run.state);
      if (best) save_checkpoint((dir / "best.h5").string(), *run.model, *run.optimizer, run.state);
    }
  }
  if (lead) {
    if (o.profile && train_steps) print_profile(profiler, train_seconds, train_steps);
    if (run.val_loader && last_val.images > 0)
      std::printf("final validation accuracy %.4f (best %.4f)\n", last_val.accuracy, run.state.best_accuracy);
  }
  world.barrier();
  return 0;
}

void report(const Communicator* world, const std::string& message) {
  if (world && world->size() > 1)
    std::fprintf(stderr, "ddl_train: error (rank %d): %s\n", world->rank(), message.c_str());
  else
    std::fprintf(stderr, "ddl_train: error: %s\n", message.c_str());
  std::fflush(stderr);
}

std::string describe_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const dnnl::error& err) {
    return std::string("oneDNN: ") + err.what() + " (status " + std::to_string(err.status) + ")";
  } catch (const std::exception& err) {
    return err.what();
  }
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  using namespace ddl;
  MpiEnvironment mpi(&argc, &argv);
  std::optional<Communicator> world;
  std::optional<Run> run;
  // Set-up: every rank learns whether any rank failed, so all stop together with exit code 2.
  std::exception_ptr setup_error;
  try {
    world.emplace();
    auto options = parse_train_options(argc, argv);
    if (!options) return world->any(false) ? 2 : 0;
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
    return train(*run, *world);
  } catch (...) {
    // A failure during training: the other ranks may be waiting in a collective, so end them all.
    report(&*world, describe_exception(std::current_exception()));
    run.reset();
    abort_all_ranks(1);
  }
}
