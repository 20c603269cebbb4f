// What rank 0 prints of a run: the header of each layout's session, a line an epoch, the profile; and the
// timeline file of every rank's spans.
#pragma once

#include <string>

#include "core/profiler.hpp"
#include "core/train/timeline.hpp"
#include "core/train/trainer.hpp"
#include "launch/train/job.hpp"
#include "launch/train/session.hpp"

namespace ddl {

// The figures of an epoch, the largest or summed over the ranks.
struct EpochFigures {
  int epoch = 0;  // counted from 1
  std::uint64_t step = 0;  // optimizer steps since the run began, at the epoch's end
  PassMetrics train, val;
  bool validated = false;
  double lr = 0;
  double peak_mb = 0;          // the largest rank's resident memory
  double comm_share = 0;       // of the slowest rank's epoch spent waiting for all-reduces
  double reduced_bytes = 0;    // all-reduced, every stage's share once
  double pipeline_wait_s = 0;  // the stages' mean
  double data_wait_share = 0;  // of the epoch the step waited for images, the slowest rank's
  double skipped = 0;          // corrupt images skipped, over every rank
  double tensor_bytes = 0;     // sent by the busiest rank to its tensor group
};

void print_header(const Job& job, Session& session);
// One line on rank 0, and a record in the metrics file.
void report_epoch(Job& job, const Session& session, const EpochFigures& f);
void print_profile(const Profiler& profiler, double train_seconds, std::size_t steps);
// One Chrome trace file for the whole job, written by rank 0. Collective over the job's ranks.
void write_timeline(const Job& job, const Session& session);
// What a resumed run does differently from the run that wrote its checkpoint ("lr 0.001 -> 0.01, ..."):
// allowed (a lower learning rate, more epochs), but said, since it is no longer the same run.
std::string changed_options(const std::string& before, const std::string& now);

}  // namespace ddl
