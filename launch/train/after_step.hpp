// What runs on every rank after each training step: the step counted for the hang detector, the replica
// check (--check-replicas), the re-planner's timing and its decision (--replan-every), and the vote on a
// stop signal, which every rank must take at the same step.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "comm/stop_vote.hpp"
#include "core/profiler.hpp"
#include "launch/replanner.hpp"
#include "launch/test_hooks.hpp"
#include "launch/train/job.hpp"
#include "launch/train/session.hpp"

namespace ddl {

// Stops the job, or with --on-divergence resync copies replica 0's parameters (and with_optimizer, its
// optimizer state) to the others and says so. Collective over the stage's replicas.
void check_replicas(const Job& job, Session& session, const std::string& when, bool with_optimizer);

class AfterStep {
 public:
  // Collective over the job's ranks (the stop vote's communicator).
  AfterStep(Job& job, Session& session, const Profiler& profiler, const std::atomic<int>& stop_signal);

  // After a step; last_of_run: nothing is left to move to another layout. True ends the epoch here, on
  // every rank alike: a stop signal, or a re-plan's move (next()).
  bool operator()(bool last_of_run);
  // Before an epoch's first step: where the re-planner's timing of that step starts.
  void epoch_begins() { step_began_ = std::chrono::steady_clock::now(); }
  // At an epoch's end: whether some rank was signalled to stop (late in the epoch, or in its last step).
  bool stop_at_epoch_end();
  // Collective over every rank, at a step boundary: a re-plan, whose move next() holds.
  void consider_replan();
  const std::optional<Switch>& next() const { return next_; }
  int signal() const { return stop_signal_.load(); }

 private:
  Job& job_;
  Session& session_;
  const Profiler& profiler_;
  const std::atomic<int>& stop_signal_;
  StopVote stop_vote_;
  std::optional<Switch> next_;
  const ReplicaPerturbation perturbation_ = ReplicaPerturbation::from_environment();
  // A re-planning run times its steps; the first one of a layout builds its primitives and is left out.
  std::chrono::steady_clock::time_point step_began_;
  bool first_step_of_layout_ = true;
};

}  // namespace ddl
