// Re-planning during training (--strategy auto | data | pipeline, --replan-every; Baligodugula and Amsaad's
// Algorithm 1 run again): at a step boundary every rank measures what the current layout's layers took since
// the last time, and the links again; the profile is recalibrated to those figures
// (core/plan/recalibrate.hpp), and the planner runs again on it. Another layout predicted at least
// kSwitchGain faster than the current one under the same figures is returned, for ddl_train to move the run
// to it.
//
// Every input to the decision is reduced over all ranks first (the slowest rank's figures), so every rank
// computes the same plan from the same numbers; ddl_train still checks that they agree.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/plan/search.hpp"
#include "core/profiler.hpp"
#include "launch/strategy.hpp"
#include "launch/train_options.hpp"

namespace ddl {

constexpr double kSwitchGain = 0.10;

// Whether the job should move from `current` (predicted `now` under the figures just measured) to the
// plan's layout: another layout, at least kSwitchGain faster.
bool worth_moving(const Layout& current, const Prediction& now, const Plan& next);

struct Switch {
  PlanReport plan;
  std::string reason;  // one line for the log: the figures measured and the two predictions
};

class Replanner {
 public:
  // given: the options as the user gave them (the strategy and its constraints, the batch); layout: the
  // one the run starts in, chosen from `profile`.
  // measured_link_fault: a test build's change to each link a re-plan measured (injected_faults.hpp).
  Replanner(TrainOptions given, Profile profile, Cluster cluster, double memory_limit_bytes, double images_bytes,
            Layout layout, std::function<void(Link&, unsigned long long step)> measured_link_fault = {});

  // After a layout's first steps (AfterStep::kWarmUpSteps: they build its primitives and let the buffer pool
  // learn, and are not measured): the layers' times in `profiler` and the steps' from here on count. `step`
  // counts the run's steps.
  void begin_measuring(const Profiler& profiler, unsigned long long step);
  void step_took(double seconds);
  // Due after this many steps of the run (counted over the run, not the epoch)?
  bool due(unsigned long long steps_done) const;
  // Collective over `world` at a step boundary, on every rank at the same step. `profiler` times this
  // rank's layers (the first of them is the model's layer `first_layer`). Takes what was measured since
  // begin_measuring() or the last re-plan (nothing measured: no re-plan), and after a switch takes the
  // new layout as current.
  std::optional<Switch> replan(const Communicator& world, const Profiler& profiler, std::size_t first_layer,
                               unsigned long long step);

 private:
  TrainOptions given_;
  Profile profile_;
  Cluster cluster_;
  double memory_limit_bytes_, images_bytes_;  // plan_strategy's
  Layout layout_;
  // The profile's links: for those that cannot be measured here, and for the sizes a re-plan does not time.
  Link given_within_, given_between_;
  std::function<void(Link&, unsigned long long)> measured_link_fault_;
  bool measuring_ = false;
  std::vector<double> previous_totals_;  // this rank's layers' seconds at the last re-plan
  unsigned long long previous_step_ = 0;  // of the last re-plan (or where measuring began)
  double step_seconds_ = 0;               // the steps timed since then
  unsigned long long steps_timed_ = 0;
};

}  // namespace ddl
