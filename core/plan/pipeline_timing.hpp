// A pipeline step's time from its stages' and links' times, each stage running its schedule (stage_ops):
// how the cost model times GPipe's and 1F1B's steps.
#pragma once

#include <vector>

#include "core/train/pipeline_schedule.hpp"

namespace ddl {

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

}  // namespace ddl
