#include "core/plan/balanced_partition.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.hpp"

namespace ddl {

std::vector<std::size_t> balanced_partition(const std::vector<double>& time, const std::vector<double>& memory,
                                            int stages, const std::vector<bool>& kept_with_previous) {
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
        if (j > 0 && j < kept_with_previous.size() && kept_with_previous[j]) continue;
        const double c = std::max(best[k - 1][j], cost(j, i));
        if (c < best[k][i]) {
          best[k][i] = c;
          from[k][i] = j;
        }
      }
  if (best[S][n] == inf)
    throw InputError(std::to_string(stages) + " pipeline stages would part layers that share a weight: at most " +
                     "as many stages as places to cut between the others");
  std::vector<std::size_t> counts(S);
  for (std::size_t k = S, i = n; k > 0; --k) {
    counts[k - 1] = i - from[k][i];
    i = from[k][i];
  }
  return counts;
}

}  // namespace ddl
