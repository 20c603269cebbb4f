// Which layout a job trains in: the one the options give (--strategy manual), or the planner's (auto, data,
// pipeline), from a profile measured on the job's ranks or loaded from a file; later, a re-plan's.
#pragma once

#include <string>

#include "launch/strategy.hpp"
#include "launch/train/job.hpp"

namespace ddl {

// A layout, and what the run's header says of how it came to be.
struct ChosenLayout {
  Layout layout;
  std::string split_report;                               // with T > 1: what splits, what stays whole and why
  std::string plan_report;                                // a planned layout: the planner's report
  std::string replan_reason;                              // a re-plan's move: why, in place of the model's summary
  double predicted_step_s = 0, predicted_comm_share = 0;  // by the plan
};

// --pipeline-stages, --tensor-parallel, --micro-batches, --partition, --schedule, --tensor-split,
// --batch-size and --bucket-mb, checked against the model and the rank count. Throws InputError.
ChosenLayout manual_layout(const TrainOptions& options, Model& whole, int ranks);
// The planner's layout, its split checked against the model.
ChosenLayout planned_layout(const PlanReport& plan, Model& whole);
// The job's first layout, the same on every rank. Collective over the job's ranks; with --strategy other than
// manual it measures (or loads) the profile and sets up the job's re-planner. Throws InputError.
ChosenLayout first_layout(Job& job);

}  // namespace ddl
