#include "core/plan/pipeline_timing.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace ddl {

double pipeline_step_seconds(PipelineSchedule schedule, const std::vector<StageSeconds>& stages,
                             const std::vector<MessageSeconds>& messages, int micro_batches) {
  const int S = static_cast<int>(stages.size()), M = micro_batches;
  if (S < 1 || M < 1 || messages.size() + 1 != stages.size())
    throw Error("pipeline_step_seconds: bad arguments (" + std::to_string(S) + " stages, " +
                std::to_string(messages.size()) + " links, " + std::to_string(M) + " micro-batches)");
  constexpr double kNotYet = -1;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  // When each micro-batch's activations (arrive[0]) and gradient (arrive[1]) reach each stage.
  std::vector<std::vector<double>> arrive[2];
  for (auto& a : arrive) a.assign(at(S), std::vector<double>(at(M), kNotYet));
  for (auto& t : arrive[0][0]) t = 0;  // the first stage's input is at hand
  std::vector<std::vector<PipelineOp>> ops;
  for (int s = 0; s < S; ++s) ops.push_back(stage_ops(schedule, s, S, M));
  std::vector<std::size_t> next(at(S), 0);
  std::vector<double> free_at(at(S), 0), link_free[2];
  for (auto& l : link_free) l.assign(messages.size(), 0);
  // Each stage runs its ops while their inputs have arrived; a sweep that runs none would mean a schedule
  // that waits on itself.
  for (std::size_t left = at(2 * S * M); left > 0;) {
    const std::size_t before = left;
    for (int s = 0; s < S; ++s) {
      for (; next[at(s)] < ops[at(s)].size(); ++next[at(s)], --left) {
        const PipelineOp op = ops[at(s)][next[at(s)]];
        const int way = op.forward ? 0 : 1, to = op.forward ? s + 1 : s - 1;  // where its output goes
        const double ready = arrive[way][at(s)][at(op.micro)];
        if (ready == kNotYet) break;
        const StageSeconds& t = stages[at(s)];
        double& done = free_at[at(s)];
        done = std::max(done, ready) + (op.forward ? t.forward : t.backward);
        if (to == S) arrive[1][at(s)][at(op.micro)] = done;  // the last stage turns its forward around
        if (to < 0 || to >= S) continue;
        const std::size_t link = at(std::min(s, to));
        const double sent = std::max(link_free[way][link], done);
        link_free[way][link] = sent + messages[link].occupies;
        arrive[way][at(to)][at(op.micro)] = sent + messages[link].arrives;
      }
    }
    if (left == before) throw Error("pipeline_step_seconds: the schedule waits on itself");
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

double ideal_bubble(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace ddl
