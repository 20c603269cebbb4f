#include "launch/thread_placement.hpp"

#include <algorithm>

#include "core/thread_affinity.hpp"

namespace ddl {
namespace {

std::string span(const std::vector<int>& cpus) {
  if (cpus.empty()) return "none";
  return cpus.size() == 1 ? std::to_string(cpus[0]) : std::to_string(cpus.front()) + "-" + std::to_string(cpus.back());
}

}  // namespace

ThreadPlacement place_threads(const std::vector<int>& allowed, int local_rank, int sharing, int threads,
                              int loader_threads) {
  ThreadPlacement p;
  const std::size_t size = allowed.size() / static_cast<std::size_t>(std::max(1, sharing));
  const std::size_t begin = size * static_cast<std::size_t>(std::clamp(local_rank, 0, std::max(0, sharing - 1)));
  if (size < static_cast<std::size_t>(threads + loader_threads)) {
    p.note = "threads not pinned: " + std::to_string(size) + " CPUs a rank for " + std::to_string(threads) +
             " compute and " + std::to_string(loader_threads) + " loader threads";
    return p;
  }
  const auto at = [&](std::size_t k) { return allowed.begin() + static_cast<std::ptrdiff_t>(begin + k); };
  const auto compute = static_cast<std::size_t>(threads), all = compute + static_cast<std::size_t>(loader_threads);
  p.compute.assign(at(0), at(compute));
  p.loader.assign(at(compute), at(all));
  p.note =
      "compute threads on CPUs " + span(p.compute) + (p.loader.empty() ? "" : ", loader threads on " + span(p.loader));
  return p;
}

void pin_compute_threads(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
    // The whole set for each, not a CPU each: the master thread's later threads (the all-reduce's) inherit it,
    // and the system still balances the compute threads among their CPUs.
#pragma omp parallel
  pin_this_thread(cpus);
}

}  // namespace ddl
