#include "launch/train/after_step.hpp"

#include <cstdio>

#include "comm/replica_check.hpp"
#include "core/checksum.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

// The values every replica of a stage must hold alike: the parameters, and with the optimizer's state
// (momentum, Adam's moments: derived from averaged gradients) unless each replica keeps its own shard of
// it. Not the layers' state: BatchNorm's running statistics come from each replica's own images.
std::vector<NamedValues> replica_values(Session& session, bool with_optimizer) {
  std::vector<NamedValues> values;
  const std::span<const float> params = session.model->params();
  for (const auto& e : session.model->param_entries()) values.push_back({e.name, params.subspan(e.offset, e.size), {}});
  if (with_optimizer && !session.optimizer->sharded())
    for (const auto& s : session.optimizer->state()) values.push_back({"optimizer " + s.name, s.floats, s.words});
  return values;
}

}  // namespace

void check_replicas(const Job& job, Session& session, const std::string& when, bool with_optimizer) {
  const Communicator& replicas = session.grid.stage_replicas();
  // With sharded parameters (ZeRO's stage 3) no replica holds another's values between steps: nothing to
  // compare, and nothing a repair could copy.
  if (replicas.size() == 1 || session.layout().shards_parameters()) return;
  const std::string difference = replica_difference(replicas, replica_values(session, with_optimizer));
  if (difference.empty()) return;
  if (job.options.on_divergence == OnDivergence::stop)
    throw Error("replicas diverged " + when + ": " + difference +
                " (a non-deterministic kernel, or faulty memory or network on a node; --on-divergence resync copies "
                "replica 0's state and goes on)");
  replicas.broadcast(session.model->params(), 0);
  if (!session.optimizer->sharded())
    for (const auto& s : session.optimizer->state()) {
      replicas.broadcast(s.floats, 0);
      replicas.broadcast(s.words, 0);
    }
  if (replicas.rank() == 0) {
    std::fprintf(stderr,
                 "ddl_train: replicas diverged %s: %s; copied rank %d's parameters%s to them (--on-divergence "
                 "resync)\n",
                 when.c_str(), difference.c_str(), replicas.world_rank(0),
                 session.optimizer->sharded() ? "" : " and optimizer state");
    std::fflush(stderr);
  }
}

AfterStep::AfterStep(Job& job, Session& session, const Profiler& profiler, const std::atomic<int>& stop_signal)
    : job_(job), session_(session), profiler_(profiler), stop_signal_(stop_signal), vote_(job.world) {}

bool AfterStep::operator()(bool last_of_run) {
  const unsigned long long step = count_step();
  check_replicas_due(step);
  time_step_for_replanner(step);
  const bool stop = vote_on_stop_and_checkpoint();
  if (!stop && !last_of_run && job_.replanner && job_.replanner->due(step)) consider_replan();
  step_began_ = std::chrono::steady_clock::now();
  return stop || next_.has_value();
}

unsigned long long AfterStep::count_step() {
  job_.world.hang_detector()->step_done();
  const unsigned long long step = ++job_.steps_run;
  ++job_.steps_since_checkpoint;
  if (job_.faults.after_step) job_.faults.after_step(session_.model->params(), job_.world.rank(), step);
  return step;
}

void AfterStep::check_replicas_due(unsigned long long step) {
  const int every = job_.options.check_replicas;
  if (every > 0 && step % static_cast<unsigned>(every) == 0)
    check_replicas(job_, session_, "after step " + std::to_string(step), false);
}

void AfterStep::time_step_for_replanner(unsigned long long step) {
  if (!job_.replanner) return;
  if (warm_up_steps_left_ == 0)
    job_.replanner->step_took(std::chrono::duration<double>(std::chrono::steady_clock::now() - step_began_).count());
  else if (--warm_up_steps_left_ == 0)
    job_.replanner->begin_measuring(profiler_, step);
}

// Whether the run stops here; sets checkpoint_due_.
bool AfterStep::vote_on_stop_and_checkpoint() {
  const TrainOptions& o = job_.options;
  const bool checkpoints = !o.checkpoint_dir.empty();
  StepAsks asks{.stop = stop_signal_.load() != 0};
  if (checkpoints && o.checkpoint_every_seconds > 0 && job_.world.rank() == 0 && !asked_for_checkpoint_) {
    const std::chrono::duration<double> since = std::chrono::steady_clock::now() - job_.last_checkpoint;
    asks.checkpoint = asked_for_checkpoint_ = since.count() >= o.checkpoint_every_seconds;
  }
  const StepAsks agreed = vote_.step(asks);
  checkpoint_due_ = checkpoints && (agreed.checkpoint || (o.checkpoint_every_steps > 0 &&
                                                          job_.steps_since_checkpoint >= o.checkpoint_every_steps));
  return agreed.stop;
}

// A checkpoint asked for in the epoch's last step is the epoch's own.
bool AfterStep::stop_at_epoch_end() { return job_.world.any(vote_.finish().stop || stop_signal_.load() != 0); }

void AfterStep::checkpoint_written() {
  job_.last_checkpoint = std::chrono::steady_clock::now();
  job_.steps_since_checkpoint = 0;
  asked_for_checkpoint_ = checkpoint_due_ = false;
}

void AfterStep::consider_replan() {
  HangDetector& hang = *job_.world.hang_detector();
  hang.set_phase("re-planning");
  std::optional<Switch> next =
      job_.replanner->replan(job_.world, profiler_, session_.model->first_layer(), job_.steps_run);
  job_.world.check_same("the re-plan's decision",
                        Checksum().add(next ? next->plan.chosen.layout.describe() : "keep").value());
  next_ = std::move(next);
  hang.set_phase("training");
}

}  // namespace ddl
