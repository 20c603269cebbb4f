#include "core/train/pipeline_schedule.hpp"

#include <algorithm>
#include <limits>
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

std::vector<std::size_t> balanced_partition(const std::vector<double>& time, const std::vector<double>& memory,
                                            int stages) {
  const std::size_t n = time.size();
  if (memory.size() != n) throw Error("balanced_partition: one time and one memory figure per layer");
  if (stages < 1 || static_cast<std::size_t>(stages) > n)
    throw InputError(std::to_string(stages) + " pipeline stages for a model of " + std::to_string(n) +
                     " layers: at most one stage per layer");
  std::vector<double> t(n + 1, 0.0), m(n + 1, 0.0);  // prefix sums
  for (std::size_t i = 0; i < n; ++i) {
    t[i + 1] = t[i] + time[i];
    m[i + 1] = m[i] + memory[i];
  }
  const double total_t = t[n] > 0 ? t[n] : 1.0, total_m = m[n] > 0 ? m[n] : 1.0;
  auto cost = [&](std::size_t a, std::size_t b) {  // layers [a, b)
    return std::max((t[b] - t[a]) / total_t, (m[b] - m[a]) / total_m);
  };
  // best[k][i]: the least largest cost of cutting the first i layers into k stages; from[k][i]: last cut.
  const double inf = std::numeric_limits<double>::infinity();
  const auto S = static_cast<std::size_t>(stages);
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<std::size_t>> from(S + 1, std::vector<std::size_t>(n + 1, 0));
  best[0][0] = 0.0;
  for (std::size_t k = 1; k <= S; ++k)
    for (std::size_t i = k; i <= n; ++i)
      for (std::size_t j = k - 1; j < i; ++j) {
        const double c = std::max(best[k - 1][j], cost(j, i));
        if (c < best[k][i]) {
          best[k][i] = c;
          from[k][i] = j;
        }
      }
  std::vector<std::size_t> counts(S);
  for (std::size_t k = S, i = n; k > 0; --k) {
    counts[k - 1] = i - from[k][i];
    i = from[k][i];
  }
  return counts;
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
