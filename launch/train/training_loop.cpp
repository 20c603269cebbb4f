#include "launch/train/training_loop.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "comm/mpi_environment.hpp"
#include "comm/mpi_replica_group.hpp"
#include "comm/mpi_stage_link.hpp"
#include "core/checksum.hpp"
#include "core/data/sampler.hpp"
#include "core/train/resources.hpp"
#include "launch/error_line.hpp"
#include "launch/progress_bar.hpp"
#include "launch/text_fields.hpp"
#include "launch/train/after_step.hpp"
#include "launch/train/checkpoints.hpp"
#include "launch/train/progress_mark.hpp"
#include "launch/train/run_report.hpp"

namespace ddl {
namespace {

template <typename T>
std::vector<T> select(const std::vector<T>& from, const std::vector<std::size_t>& positions) {
  std::vector<T> out;
  out.reserve(positions.size());
  for (auto p : positions) out.push_back(from[p]);
  return out;
}

// Below a split layer that gathers its group's batch, each rank of the group kept its own BatchNorm
// statistics, from its own images; evaluation runs the same images on every rank of the group and a
// checkpoint keeps one rank's, so the group takes its first rank's first, as if one model had run.
void share_group_state(Session& session) {
  if (session.layout().tensor == 1) return;
  for (const StateView& s : session.model->state())
    if (!s.floats.empty()) session.grid.tensor().broadcast(s.floats, 0);
}

// MLPerf's metadata of an epoch (from 0): its number counted from 1.
std::string epoch_number(int epoch) { return "\"epoch_num\": " + std::to_string(epoch + 1); }

// The objects of one session's training, and its epochs.
class TrainingLoop {
 public:
  TrainingLoop(Job& job, Session& session, StopSignals& stop_signals);
  SessionEnd run();

 private:
  // The epoch's training steps; a value when the session ends inside the epoch.
  std::optional<SessionEnd> train_steps(int epoch, PassMetrics& tr);
  // Validation, the epoch's figures, checkpoints and report; a value when the session ends there.
  std::optional<SessionEnd> end_epoch(int epoch, const PassMetrics& tr);
  EpochFigures reduce_figures(int epoch, const PassMetrics& tr);
  // last.h5, and best.h5 when `best`, every rank waiting for the writers; `when` for the replica check.
  void save_checkpoints(const std::string& when, bool best);
  // --checkpoint-every: last.h5 between two steps of an epoch, from which --resume continues exactly.
  void save_midway(int epoch, std::size_t step, std::size_t steps);
  SessionEnd move_to_next_layout();
  SessionEnd stop_midway(const PassMetrics& tr, int epoch, std::size_t steps);
  SessionEnd finish(int code);
  // MLPerf's submission keys, init_stop and run_start: once a job, when the first layout starts training.
  void log_run_start();
  // This rank's images of the epoch, in batches of the layout's.
  std::vector<std::size_t> epoch_indices(int epoch) const {
    auto indices = training_indices(job_.settings.train_subset.size(), o_.seed, epoch,
                                    layout_.data_rank(session_.position()), layout_.data_ranks(), layout_.batch);
    if (o_.steps_per_epoch > 0)
      indices.resize(std::min(indices.size(), static_cast<std::size_t>(o_.steps_per_epoch) * layout_.batch));
    return indices;
  }
  // Whether epoch (from 0) ends with a validation: every --eval-every epochs and the last.
  bool validates(int epoch) const {
    return !job_.settings.val_subset.empty() && ((epoch + 1) % o_.eval_every == 0 || epoch + 1 == o_.epochs);
  }

  Job& job_;
  Session& session_;
  const TrainOptions& o_;
  const Layout& layout_;
  const Communicator& world_;
  const bool lead_;
  ProgressMark progress_mark_;  // world rank 0's
  MpiReplicaGroup group_;
  std::optional<MpiStageLink> link_;
  Profiler profiler_;  // every micro-batch's copy adds to it
  std::optional<Trainer> trainer_;
  std::optional<AfterStep> after_step_;
  bool bar_ = false;
  bool stopped_ = false;  // by a signal, agreed at the end of the epoch's steps
  double seconds_trained_ = 0;
  std::size_t steps_trained_ = 0;
  std::size_t epoch_steps_ = 0;    // the steps of an epoch
  bool target_reached_ = false;    // by a validation's accuracy (--target-accuracy)
  PassMetrics last_val_;
  StopSignals& stop_signals_;
};

TrainingLoop::TrainingLoop(Job& job, Session& session, StopSignals& stop_signals)
    : job_(job),
      session_(session),
      o_(job.options),
      layout_(session.layout()),
      world_(job.world),
      lead_(job.world.rank() == 0),
      progress_mark_(lead_ ? o_.checkpoint_dir : ""),
      group_(session.grid.stage_replicas(),
             o_.allreduce(),
             {static_cast<std::size_t>(layout_.reduce_bucket_bytes()), layout_.shards_gradients(),
              !layout_.plain_data_parallel(), layout_.shards_parameters()}),
      stop_signals_(stop_signals) {
  world_.check_same("the configuration (options, model)",
                    Checksum().add(o_.describe(layout_) + session.model->name()).value() ^
                        session.model->whole_param_count());
  group_.broadcast(session.model->params(), 0);
  if (layout_.stages > 1) link_.emplace(session.grid.pipeline());
}

SessionEnd TrainingLoop::run() {
  if (lead_) print_header(job_, session_);
  if (job_.state.epochs_done >= static_cast<std::uint64_t>(o_.epochs) && job_.state.steps_done == 0) {
    if (lead_)
      std::printf("nothing to train: %s holds %llu epochs, and --epochs %d counts all epochs, resumed ones too\n",
                  job_.resume_path.c_str(), static_cast<unsigned long long>(job_.state.epochs_done), o_.epochs);
    return {};
  }
  if (o_.target_accuracy > 0 && job_.state.best_accuracy >= o_.target_accuracy) {
    if (lead_)
      std::printf("nothing to train: %s reached the target accuracy %.4f already (best %.4f)\n",
                  job_.resume_path.c_str(), o_.target_accuracy, job_.state.best_accuracy);
    return {};
  }
  const std::vector<Model*> copies = session_.model_copies();
  if (o_.profile || job_.replanner)
    for (Model* m : copies) m->attach_profiler(&profiler_);
  trainer_.emplace(session_.ctx, copies, *session_.optimizer, session_.schedule, group_, link_ ? &*link_ : nullptr,
                   session_.micro_batching, session_.grid.tensor_group(), o_.label_smoothing);
  if (lead_ && !o_.metrics_path.empty() && !job_.metrics)
    job_.metrics.emplace(o_.metrics_path, !job_.resume_path.empty());
  // Open MPI hands its ranks a pseudo-terminal even when mpirun's own output goes to a file, so under
  // mpirun "auto" cannot tell and stays with plain lines; --progress always forces the bar. A pipeline's
  // first stage does not see the loss, so it shows no bar.
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  bar_ = lead_ && layout_.stages == 1 &&
         (o_.progress == Progress::always ||
          (o_.progress == Progress::automatic && isatty(STDOUT_FILENO) && !under_mpirun));
  stop_signals_.arm();
  after_step_.emplace(job_, session_, profiler_, stop_signals_.received());
  try {
    if (lead_) log_run_start();
    if (!o_.timeline_path.empty()) trainer_->record(&job_.timeline);
    for (auto epoch = static_cast<int>(job_.state.epochs_done); epoch < o_.epochs && !target_reached_; ++epoch) {
      PassMetrics tr;
      if (auto end = train_steps(epoch, tr)) return std::move(*end);
      if (auto end = end_epoch(epoch, tr)) return std::move(*end);
    }
    const auto peaks = world_.allgather(peak_resident_bytes());
    if (lead_) {
      if (world_.size() > 1) {
        std::printf("peak RSS by rank (MB):");
        for (auto p : peaks) std::printf(" %.0f", static_cast<double>(p) / (1 << 20));
        std::printf("\n");
      }
      if (o_.profile && steps_trained_) print_profile(profiler_, seconds_trained_, steps_trained_);
      if (!job_.settings.val_subset.empty() && last_val_.images > 0)
        std::printf("final validation accuracy %.4f (best %.4f)\n", last_val_.accuracy, job_.state.best_accuracy);
      // Without a target, a run that trained every epoch succeeded.
      if (job_.mlperf)
        job_.mlperf->stop("run_stop", std::string("\"status\": ") +
                                          (target_reached_ || o_.target_accuracy == 0 ? "\"success\"" : "\"aborted\""));
    }
    world_.barrier();
    return finish(0);
  } catch (...) {
    fail_during_training(world_, std::current_exception());
  }
}

std::optional<SessionEnd> TrainingLoop::train_steps(int epoch, PassMetrics& tr) {
  const int batch = layout_.batch;
  auto indices = epoch_indices(epoch);
  const std::size_t steps = indices.size() / batch;
  // A run stopped in the middle of an epoch resumes at the step after the last one it finished.
  const std::size_t first_step =
      static_cast<std::uint64_t>(epoch) == job_.state.epochs_done ? job_.state.steps_done : 0;
  if (first_step > steps)
    throw InputError(job_.resume_path + " was written at step " + std::to_string(first_step) + " of epoch " +
                     std::to_string(epoch + 1) + ", but an epoch of this run has " + std::to_string(steps) +
                     " steps: resume with the global batch it was written with (--global-batch " +
                     std::to_string(layout_.global_batch()) + " now)");
  indices.erase(indices.begin(), indices.begin() + static_cast<std::ptrdiff_t>(first_step * batch));
  if (job_.mlperf && first_step == 0) {
    if (!job_.settings.val_subset.empty() && epoch % o_.eval_every == 0)  // the epochs up to an evaluation
      job_.mlperf->start("block_start", "\"first_epoch_num\": " + std::to_string(epoch + 1) + ", \"epoch_count\": " +
                                            std::to_string(std::min(o_.eval_every, o_.epochs - epoch)));
    job_.mlperf->start("epoch_start", epoch_number(epoch));
  }
  BatchLoader* loader = session_.train_loader ? &*session_.train_loader : nullptr;
  if (loader) loader->start(select(job_.settings.train_subset, indices), true, o_.seed, epoch, first_step);
  ProgressBar progress(epoch + 1, o_.epochs);
  group_.take_stats();
  if (link_) link_->take_wait_seconds();
  if (MpiTensorGroup* tensor = session_.grid.tensor_group()) tensor->take_bytes_sent();
  std::size_t step_in_epoch = first_step;
  const std::uint64_t first_global_step = static_cast<std::uint64_t>(epoch) * steps + first_step;
  epoch_steps_ = steps;
  if (lead_ && !o_.tensorboard_dir.empty() && !job_.tensorboard)
    job_.tensorboard.emplace(o_.tensorboard_dir, !job_.resume_path.empty(), first_global_step);
  EpochHooks hooks;
  // The loss over the last --tensorboard-every steps, from the running mean over the epoch's steps so far
  // (every step has as many images). A pipeline's first stage, rank 0, sees no loss.
  double loss_total_before = 0;
  std::size_t logged_step = first_step;
  const bool per_step_scalars = job_.tensorboard && layout_.stages == 1;
  if (bar_ || per_step_scalars)
    hooks.progress = [&](const StepProgress& p) {
      if (bar_) progress.update(p);
      if (!per_step_scalars ||
          (p.step - logged_step < static_cast<std::size_t>(o_.tensorboard_every) && p.step < steps))
        return;
      const double total = p.loss * static_cast<double>(p.step - first_step);
      // TensorBoard's x axis: optimizer steps since the run began, resumed ones too.
      job_.tensorboard->scalars(first_global_step + (p.step - first_step),
                                {{"train/loss", (total - loss_total_before) / double(p.step - logged_step)},
                                 {"train/learning_rate", trainer_->last_lr()}});
      loss_total_before = total;
      logged_step = p.step;
    };
  hooks.after_step = [&] {
    const bool end = (*after_step_)(++step_in_epoch == steps && epoch + 1 == o_.epochs);
    progress_mark_.step_done(static_cast<std::uint64_t>(epoch), step_in_epoch, steps);
    if (!end && step_in_epoch < steps && after_step_->checkpoint_due()) save_midway(epoch, step_in_epoch, steps);
    return end;
  };
  world_.hang_detector()->set_phase("training");
  after_step_->timing_resumes();
  tr = trainer_->train_epoch(loader, epoch, steps, first_step, hooks);
  if (bar_) progress.finish();
  // A signal that came late in the epoch (or during the last step) stops the run at the epoch's end.
  stopped_ = after_step_->stop_at_epoch_end();
  if (first_step + tr.steps >= steps) return std::nullopt;  // the whole epoch
  job_.state.steps_done = first_step + tr.steps;
  if (after_step_->next() && !stopped_) return move_to_next_layout();
  return stop_midway(tr, epoch, steps);
}

std::optional<SessionEnd> TrainingLoop::end_epoch(int epoch, const PassMetrics& tr) {
  job_.state.steps_done = 0;
  EpochFigures figures = reduce_figures(epoch, tr);
  seconds_trained_ += tr.seconds;
  steps_trained_ += tr.steps;
  HangDetector& hang = *world_.hang_detector();
  hang.set_phase("evaluation");
  share_group_state(session_);
  if (job_.mlperf) job_.mlperf->stop("epoch_stop", epoch_number(epoch));
  if (validates(epoch)) {
    if (job_.mlperf) job_.mlperf->start("eval_start", epoch_number(epoch));
    const GridPosition& p = session_.position();
    const auto mine = evaluation_indices(job_.settings.val_subset.size(), p.replica, layout_.replicas);
    if (session_.val_loader) session_.val_loader->start(select(job_.settings.val_subset, mine), false, o_.seed, epoch);
    figures.val = trainer_->evaluate(session_.val_loader ? &*session_.val_loader : nullptr, mine.size());
    figures.validated = true;
    last_val_ = figures.val;
    // One vote, as for best.h5: every rank must stop after the same epoch.
    double reached[1] = {o_.target_accuracy > 0 && figures.val.accuracy >= o_.target_accuracy ? 1.0 : 0.0};
    world_.allreduce_max(reached);
    target_reached_ = reached[0] > 0;
    if (job_.mlperf) {
      job_.mlperf->stop("eval_stop", epoch_number(epoch));
      job_.mlperf->point("eval_accuracy", std::to_string(figures.val.accuracy), epoch_number(epoch));
      job_.mlperf->stop("block_stop",
                        "\"first_epoch_num\": " + std::to_string(epoch / o_.eval_every * o_.eval_every + 1));
    }
  }
  double peak_mb[1] = {static_cast<double>(peak_resident_bytes()) / (1 << 20)};
  world_.allreduce_max(peak_mb);
  figures.peak_mb = peak_mb[0];
  job_.state.epochs_done = static_cast<std::uint64_t>(epoch + 1);
  // Every rank must agree, as with sharded state every rank writes best.h5 in turn: one vote, not each
  // rank's own comparison of a float.
  double best_vote[1] = {figures.validated && figures.val.accuracy > job_.state.best_accuracy ? 1.0 : 0.0};
  world_.allreduce_max(best_vote);
  const bool best = best_vote[0] > 0;
  if (best) job_.state.best_accuracy = figures.val.accuracy;
  hang.set_phase("checkpoint");
  save_checkpoints("by the end of epoch " + std::to_string(epoch + 1), best);
  if (lead_) report_epoch(job_, session_, figures);
  if (target_reached_ && lead_)
    std::printf("reached the target accuracy %.4f after epoch %d (%.4f): the run ends here\n", o_.target_accuracy,
                epoch + 1, figures.val.accuracy);
  if (stopped_) return stop_midway(tr, epoch + 1, 0);
  if (target_reached_) return std::nullopt;
  if (!after_step_->next() && job_.replanner && o_.replan_every == TrainOptions::kReplanEachEpoch &&
      epoch + 1 < o_.epochs)
    after_step_->consider_replan();
  if (after_step_->next()) return move_to_next_layout();
  return std::nullopt;
}

// The slowest rank's wait is what the step pays for communication; a pipeline's idle share is the mean
// over its stages.
EpochFigures TrainingLoop::reduce_figures(int epoch, const PassMetrics& tr) {
  EpochFigures f;
  f.epoch = epoch + 1;
  f.step = static_cast<std::uint64_t>(epoch + 1) * epoch_steps_;
  f.train = tr;
  f.lr = trainer_->last_lr();
  const auto comm = group_.take_stats();
  // Each rank's share of its own epoch: a rank that entered the epoch early (while rank 0 still wrote a
  // checkpoint) waits longer than rank 0's epoch lasted, which once showed as 113.7%.
  double comm_share[1] = {tr.seconds > 0 ? comm.wait_seconds / tr.seconds : 0.0};
  world_.allreduce_max(comm_share);
  double bytes[1] = {comm.bytes / layout_.replicas};  // every stage's share, counted once per replica
  world_.allreduce_sum(bytes);
  double pipeline_wait[1] = {link_ ? link_->take_wait_seconds() / world_.size() : 0.0};
  world_.allreduce_sum(pipeline_wait);
  // What one rank sent to its tensor group (activations, labels, gradients of the layers below the
  // gather), the busiest rank's.
  MpiTensorGroup* tensor = session_.grid.tensor_group();
  double tensor_bytes[1] = {tensor ? tensor->take_bytes_sent() : 0.0};
  world_.allreduce_max(tensor_bytes);
  // The loader's wait and skipped images: the slowest rank's wait, every rank's skips. Ranks without a
  // loader (a pipeline's later stages) wait for their stage link instead.
  BatchLoader* loader = session_.train_loader ? &*session_.train_loader : nullptr;
  double data_wait[1] = {loader && tr.seconds > 0 ? loader->take_wait_seconds() / tr.seconds : 0.0};
  world_.allreduce_max(data_wait);
  double skipped[1] = {loader ? static_cast<double>(loader->take_skipped()) : 0.0};
  world_.allreduce_sum(skipped);
  f.data_wait_share = data_wait[0];
  f.skipped = skipped[0];
  f.comm_share = comm_share[0];
  f.reduced_bytes = bytes[0];
  f.pipeline_wait_s = pipeline_wait[0];
  f.tensor_bytes = tensor_bytes[0];
  return f;
}

void TrainingLoop::save_checkpoints(const std::string& when, bool best) {
  if (o_.checkpoint_dir.empty()) return;
  check_replicas(job_, session_, when, true);
  const std::filesystem::path dir(o_.checkpoint_dir);
  save(job_, session_, (dir / "last.h5").string(), true);
  if (best) save(job_, session_, (dir / "best.h5").string(), false);
  world_.barrier();  // the ranks that write nothing wait here, in the checkpoint phase's time limit
  after_step_->checkpoint_written();
}

void TrainingLoop::save_midway(int epoch, std::size_t step, std::size_t steps) {
  const auto began = std::chrono::steady_clock::now();
  job_.state.steps_done = step;  // epochs_done is `epoch` throughout the epoch
  HangDetector& hang = *world_.hang_detector();
  hang.set_phase("checkpoint");
  const std::string at = "in epoch " + std::to_string(epoch + 1) + " at step " + std::to_string(step) + "/" +
                         std::to_string(steps);
  trainer_->whole_parameters();  // sharded parameters: the next step gives them back again
  save_checkpoints(at, false);
  hang.set_phase("training");
  if (lead_) {
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - began;
    std::printf("%scheckpoint %s: %s/last.h5 (%.2f s)\n", bar_ ? "\n" : "", at.c_str(), o_.checkpoint_dir.c_str(),
                took.count());
    std::fflush(stdout);
  }
  after_step_->timing_resumes();
}

SessionEnd TrainingLoop::move_to_next_layout() {
  const Switch& next = *after_step_->next();
  ChosenLayout chosen = planned_layout(next.plan, *job_.whole);
  chosen.replan_reason = next.reason;
  return {0, std::move(chosen), pack_for_next_layout(job_, session_)};
}

// After SIGINT or SIGTERM (Slurm's pre-emption): every rank stopped after the same step; the checkpoint
// records how far the run got (`steps` of the epoch, 0 at an epoch's end), so --resume continues it
// exactly. Exit code 128 + the signal, as a shell reports a process ended by it.
SessionEnd TrainingLoop::stop_midway(const PassMetrics& tr, int epoch, std::size_t steps) {
  job_.state.epochs_done = static_cast<std::uint64_t>(epoch);
  const std::string last = (std::filesystem::path(o_.checkpoint_dir) / "last.h5").string();
  if (!o_.checkpoint_dir.empty() && job_.state.steps_done > 0) save(job_, session_, last, true);
  const GridPosition& p = session_.position();
  if (p.replica == 0 && p.stage == 0 && p.t == 0) {  // world rank 0, which speaks for the job
    if (job_.state.steps_done > 0)
      std::printf("stopped by a signal in epoch %d at step %llu/%zu (train loss %.4f over its last %zu steps)",
                  epoch + 1, static_cast<unsigned long long>(job_.state.steps_done), steps, tr.loss, tr.steps);
    else
      std::printf("stopped by a signal after epoch %d", epoch);
    if (o_.checkpoint_dir.empty())
      std::printf("; nothing saved (no --checkpoint-dir)\n");
    else
      std::printf("; %s holds it: continue with --resume auto\n", last.c_str());
    std::fflush(stdout);
  }
  if (job_.mlperf) job_.mlperf->stop("run_stop", "\"status\": \"aborted\"");
  const int signal = after_step_->signal();
  return finish(128 + (signal != 0 ? signal : SIGTERM));
}

void TrainingLoop::log_run_start() {
  if (!job_.mlperf || job_.mlperf_run_started) return;
  job_.mlperf_run_started = true;
  MlperfLog& log = *job_.mlperf;
  const auto text = [](const std::string& s) { return json_string(s); };
  const auto number = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", v);
    return std::string(b);
  };
  // ResNet-50 is MLPerf's "resnet"; another model is named as it is.
  log.point("submission_benchmark", text(o_.model.rfind("resnet50", 0) == 0 ? "resnet" : o_.model));
  log.point("submission_division", text("open"));
  log.point("submission_org", text("ddl"));
  log.point("submission_platform",
            text(std::to_string(world_.size()) + " ranks x " + std::to_string(job_.settings.threads) + " threads" +
                 (job_.settings.nodes.empty() ? "" : ", " + job_.settings.nodes)));
  log.point("submission_status", text("onprem"));
  log.point("cache_clear", "false");
  log.point("seed", std::to_string(o_.seed));
  log.point("global_batch_size", std::to_string(layout_.global_batch()));
  log.point("train_samples", std::to_string(job_.settings.train_subset.size()));
  log.point("eval_samples", std::to_string(job_.settings.val_subset.size()));
  log.point("gradient_accumulation_steps", "1");
  log.point("opt_name", text(option_word(o_.optimizer)));
  // MLPerf names the schedule's keys after the optimizer: lars_opt_..., sgd_opt_... (opt_... for the others).
  const bool named = o_.optimizer == OptimizerKind::lars || o_.optimizer == OptimizerKind::sgd;
  const std::string opt = named ? std::string(option_word(o_.optimizer)) + "_opt_" : "opt_";
  const LrSchedule& s = session_.schedule;
  log.point(opt + "base_learning_rate", number(s.base_lr));
  log.point(opt + "learning_rate_warmup_epochs", number(s.warmup_epochs));
  if (s.policy == LrPolicy::poly) {
    log.point(opt + "end_learning_rate", "0");
    log.point(opt + "learning_rate_decay_poly_power", number(s.power));
    log.point(opt + "learning_rate_decay_steps",
              std::to_string(static_cast<long long>(
                  std::llround(s.total_epochs * static_cast<double>(epoch_indices(0).size() / layout_.batch)))));
  }
  if (o_.optimizer != OptimizerKind::adam) log.point(opt + "momentum", number(o_.momentum));
  log.point(opt + "weight_decay", number(o_.weight_decay));
  if (o_.optimizer == OptimizerKind::lars) log.point("lars_epsilon", "0");
  log.point("label_smoothing", number(o_.label_smoothing));
  log.stop("init_stop");
  log.start("run_start");
}

SessionEnd TrainingLoop::finish(int code) {
  if (!o_.timeline_path.empty()) write_timeline(job_, session_);
  return {code, std::nullopt, {}};
}

}  // namespace

SessionEnd train(Job& job, Session& session, StopSignals& stop_signals) {
  return TrainingLoop(job, session, stop_signals).run();
}

[[noreturn]] void fail_during_training(const Communicator& world, std::exception_ptr error) {
  print_error_line("ddl_train", &world, describe_exception(error));
  abort_all_ranks(1);
}

}  // namespace ddl
