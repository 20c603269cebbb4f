#include "launch/thread_placement.hpp"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <thread>

#include "core/thread_affinity.hpp"

namespace ddl {
namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::string span(const std::vector<int>& cpus) {
  if (cpus.empty()) return "none";
  return cpus.size() == 1 ? std::to_string(cpus[0]) : std::to_string(cpus.front()) + "-" + std::to_string(cpus.back());
}

}  // namespace

ThreadPlacement place_threads(int local_rank, int ranks_on_node, int threads, int loader_threads) {
  ThreadPlacement p;
  const std::vector<int> allowed = allowed_cpus();
  // Ranks bound to CPUs of their own (mpirun --bind-to core, srun --cpu-bind) each see only theirs; ranks
  // that see the whole machine split it by their index.
  const bool own = allowed.size() < std::thread::hardware_concurrency() || ranks_on_node <= 1;
  const std::size_t size = own ? allowed.size() : allowed.size() / static_cast<std::size_t>(ranks_on_node);
  const std::size_t begin = own ? 0 : size * static_cast<std::size_t>(local_rank);
  if (size < static_cast<std::size_t>(threads + loader_threads)) {
    p.note = "threads not pinned: " + std::to_string(size) + " CPUs a rank for " + std::to_string(threads) +
             " compute and " + std::to_string(loader_threads) + " loader threads";
    return p;
  }
  p.compute.assign(allowed.begin() + static_cast<std::ptrdiff_t>(begin),
                   allowed.begin() + static_cast<std::ptrdiff_t>(begin) + threads);
  p.loader.assign(allowed.begin() + static_cast<std::ptrdiff_t>(begin) + threads,
                  allowed.begin() + static_cast<std::ptrdiff_t>(begin) + threads + loader_threads);
  p.note = "compute threads on CPUs " + span(p.compute) + (p.loader.empty() ? "" : ", loader threads on " + span(p.loader));
  return p;
}

void pin_compute_threads(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
#pragma omp parallel
  {
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    pin_this_thread({cpus[t % cpus.size()]});
  }
}

}  // namespace ddl
