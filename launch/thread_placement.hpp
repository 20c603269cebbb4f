// Where a rank's threads run: its compute threads (OpenMP's, which oneDNN uses) and its loader's decoding
// threads on CPUs of their own, so that decoding JPEG files never takes a core from a convolution. A rank
// takes its share of the CPUs it may run on: all of them where its binding is its own (mpirun --bind-to
// core, srun --cpu-bind), else, where the ranks of its node see the same CPUs (no binding, or one cgroup for
// all), a slice by its index on the node. The first `threads` CPUs of the share take the compute threads,
// the next `loader_threads` the loader's. Where the share is too small for both, nothing is pinned and the
// system schedules the threads, as ddl did before.
#pragma once

#include <string>
#include <vector>

namespace ddl {

struct ThreadPlacement {
  std::vector<int> compute, loader;  // CPU numbers; both empty where nothing is pinned
  std::string note;                  // for the run's header: where the threads run, or why they are not pinned
};

// allowed: the rank's CPUs; sharing: how many ranks of its node see the same ones (1: its own), local_rank
// its index among them.
ThreadPlacement place_threads(const std::vector<int>& allowed, int local_rank, int sharing, int threads,
                              int loader_threads);
// Every OpenMP thread, and the threads created later by the calling one (which inherit it), on `cpus`.
void pin_compute_threads(const std::vector<int>& cpus);

}  // namespace ddl
