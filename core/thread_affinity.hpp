// The CPUs a thread may run on, and pinning the calling thread to some of them (Linux): how a rank keeps its
// loader's decoding threads and its compute threads on cores of their own (launch/thread_placement.hpp
// decides which).
#pragma once

#include <pthread.h>
#include <sched.h>

#include <vector>

namespace ddl {

// The calling thread's CPUs (its binding), in order; empty where the system does not say.
inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Nothing where `cpus` is empty. A CPU taken away since (a cgroup changed) leaves the thread where it was:
// placement is an optimisation, never a reason to stop.
inline void pin_this_thread(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

}  // namespace ddl
