// The order in which one pipeline stage runs the forward and backward passes of a step's micro-batches
// (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2019).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ddl {

enum class PipelineSchedule {
  gpipe,        // every forward, then every backward
  one_f_one_b,  // after a warm-up of forwards, one forward and one backward in turn: fewer in flight
};

struct PipelineOp {
  bool forward;
  int micro;
};

// Backwards run in micro-batch order under both schedules, so gradients are summed in the same order
// whatever the schedule or the number of stages.
std::vector<PipelineOp> stage_ops(PipelineSchedule schedule, int stage, int stages, int micro_batches);
// The most micro-batches whose activations a stage holds at once under `ops`.
int micro_batches_in_flight(const std::vector<PipelineOp>& ops);
// Throws InputError unless `counts` has one positive count per stage, summing to `layers`.
void check_partition(const std::vector<std::size_t>& counts, std::size_t layers, int stages);
std::string to_string(const std::vector<std::size_t>& counts);

}  // namespace ddl
