// The order in which one pipeline stage runs the forward and backward passes of a step's micro-batches
// (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2019), and how layers are cut into stages.
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
// One micro-batch's forward and backward seconds on a stage.
struct StageSeconds {
  double forward = 0, backward = 0;
};
// A message between two stages: the seconds from its send to its receipt, and those of them in which the
// link carries it (its bytes over the bandwidth) and no other message its way.
struct MessageSeconds {
  double arrives = 0, occupies = 0;
};
// The seconds from a step's first forward to its last backward, each stage running its stage_ops in order:
// a forward waits for its micro-batch's activations from the stage before, a backward for its gradient from
// the stage after, sent over the link between stages s and s + 1 as messages[s] says while the sender goes on.
double pipeline_step_seconds(PipelineSchedule schedule, const std::vector<StageSeconds>& stages,
                             const std::vector<MessageSeconds>& messages, int micro_batches);
// The idle share of an ideal pipeline with equal stages: (S - 1) / (M + S - 1).
double ideal_bubble(int stages, int micro_batches);

// Layer counts per stage that minimise the largest stage cost, where a stage's cost is the larger of its
// share of the total time and its share of the total memory (each layer's measured figures).
std::vector<std::size_t> balanced_partition(const std::vector<double>& time, const std::vector<double>& memory,
                                            int stages);
// Throws InputError unless `counts` has one positive count per stage, summing to `layers`.
void check_partition(const std::vector<std::size_t>& counts, std::size_t layers, int stages);
std::string to_string(const std::vector<std::size_t>& counts);

}  // namespace ddl
