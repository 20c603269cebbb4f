// Where a rank's threads run: its compute threads (OpenMP's, which oneDNN uses) and its loader's decoding
// threads on cores of their own, so that decoding JPEG files never takes a core from a convolution. A rank
// takes its share of the CPUs it may run on (its binding; ranks of one node that share a binding split it
// by their index on the node; a rank whose binding is narrower than the machine has CPUs of its own): the first `threads` of that share for compute, the next `loader_threads`
// for the loader. Where the share holds fewer CPUs than both need, nothing is pinned and the system
// schedules the threads, as ddl did before.
#pragma once

#include <string>
#include <vector>

namespace ddl {

struct ThreadPlacement {
  std::vector<int> compute, loader;  // CPU numbers; both empty where nothing is pinned
  std::string note;                  // for the run's header: where the threads run, or why they are not pinned
};

// local_rank: this rank's index among the ranks_on_node of its node.
ThreadPlacement place_threads(int local_rank, int ranks_on_node, int threads, int loader_threads);
// Pins every OpenMP thread (omp_get_max_threads of them) to one CPU of `cpus` each, in order.
void pin_compute_threads(const std::vector<int>& cpus);

}  // namespace ddl
