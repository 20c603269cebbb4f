// What runs on every rank after each training step, in this order:
//   1. the step counted, for the hang detector and the job (and a test build's injected fault);
//   2. the replica check (--check-replicas), on the step's parameters before anything else reads them;
//   3. the re-planner's timing of the step (--replan-every);
//   4. the vote on a stop signal and on a checkpoint by time (--checkpoint-every), which every rank must act
//      on at the same step;
//   5. the re-plan itself, where due and the vote did not stop the run: it may move the job to another layout.
// The training loop then writes a checkpoint the vote asked for (checkpoint_due) and ends the epoch where
// operator() says so.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "comm/step_vote.hpp"
#include "core/profiler.hpp"
#include "launch/replanner.hpp"
#include "launch/train/job.hpp"
#include "launch/train/session.hpp"

namespace ddl {

// Stops the job, or with --on-divergence resync copies replica 0's parameters (and with_optimizer, its
// optimizer state) to the others and says so. Collective over the stage's replicas.
void check_replicas(const Job& job, Session& session, const std::string& when, bool with_optimizer);

class AfterStep {
 public:
  // Collective over the job's ranks (the step vote's communicator).
  AfterStep(Job& job, Session& session, const Profiler& profiler, const std::atomic<int>& stop_signal);

  // After a step; last_of_run: nothing is left to move to another layout. True ends the epoch here, on
  // every rank alike: a stop signal, or a re-plan's move (next()).
  bool operator()(bool last_of_run);
  // Where the re-planner's timing of the next step starts: before an epoch's first step, and after a
  // checkpoint written between steps.
  void timing_resumes() { step_began_ = std::chrono::steady_clock::now(); }
  // Whether --checkpoint-every asks for a checkpoint after this step, on every rank alike.
  bool checkpoint_due() const { return checkpoint_due_; }
  // A checkpoint was written (between steps or at an epoch's end): --checkpoint-every counts from here.
  void checkpoint_written();
  // At an epoch's end: whether some rank was signalled to stop (late in the epoch, or in its last step).
  bool stop_at_epoch_end();
  // Collective over every rank, at a step boundary: a re-plan, whose move next() holds.
  void consider_replan();
  const std::optional<Switch>& next() const { return next_; }
  int signal() const { return stop_signal_.load(); }

 private:
  unsigned long long count_step();
  void check_replicas_due(unsigned long long step);
  void time_step_for_replanner(unsigned long long step);
  bool vote_on_stop_and_checkpoint();

  Job& job_;
  Session& session_;
  const Profiler& profiler_;
  const std::atomic<int>& stop_signal_;
  StepVote vote_;
  std::optional<Switch> next_;
  // A re-planning run times its steps, but not a layout's first three: they build its primitives, and the
  // buffer pool learns the step's requests (two steps asking alike) and then touches its arena's fresh
  // pages. vgg16_cifar's took 3 s each, the fourth 0.35 s; timed, they made a re-plan take the difference
  // as slow links and move to a slower layout.
  static constexpr int kWarmUpSteps = 3;
  std::chrono::steady_clock::time_point step_began_;
  int warm_up_steps_left_ = kWarmUpSteps;
  // --checkpoint-every: a time is judged by world rank 0's clock alone, which asks once through the vote
  // (each rank's own clock would ask again at the step after another's ask); a step count needs no vote.
  bool asked_for_checkpoint_ = false, checkpoint_due_ = false;
};

}  // namespace ddl
