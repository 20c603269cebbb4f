#include "core/train/pipeline_schedule.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace ddl {

std::vector<PipelineOp> stage_ops(PipelineSchedule schedule, int stage, int stages, int micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1) throw Error("stage_ops: bad arguments");
  std::vector<PipelineOp> ops;
  if (schedule == PipelineSchedule::gpipe) {
    for (int m = 0; m < micro_batches; ++m) ops.push_back({true, m});
    for (int m = 0; m < micro_batches; ++m) ops.push_back({false, m});
    return ops;
  }
  // 1F1B: stage s runs S - s - 1 forwards ahead, so the last stage turns each forward straight around.
  const int warmup = std::min(stages - stage - 1, micro_batches);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) ops.push_back({true, next_forward});
  for (; next_forward < micro_batches; ++next_forward, ++next_backward) {
    ops.push_back({true, next_forward});
    ops.push_back({false, next_backward});
  }
  for (; next_backward < micro_batches; ++next_backward) ops.push_back({false, next_backward});
  return ops;
}

int micro_batches_in_flight(const std::vector<PipelineOp>& ops) {
  int now = 0, most = 0;
  for (const auto& op : ops) {
    now += op.forward ? 1 : -1;
    most = std::max(most, now);
  }
  return most;
}

void check_partition(const std::vector<std::size_t>& counts, std::size_t layers, int stages) {
  if (counts.size() != static_cast<std::size_t>(stages))
    throw InputError("--partition " + to_string(counts) + " gives " + std::to_string(counts.size()) +
                     " stages, --pipeline-stages is " + std::to_string(stages));
  if (std::find(counts.begin(), counts.end(), 0) != counts.end())
    throw InputError("--partition " + to_string(counts) + ": every stage needs at least one layer");
  const std::size_t sum = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  if (sum != layers)
    throw InputError("--partition " + to_string(counts) + " covers " + std::to_string(sum) +
                     " layers, the model has " + std::to_string(layers));
}

std::string to_string(const std::vector<std::size_t>& counts) {
  std::string s;
  for (auto c : counts) {
    if (!s.empty()) s += ',';
    s += std::to_string(c);
  }
  return s;
}

}  // namespace ddl
