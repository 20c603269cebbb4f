// The default thread count of a rank: the cores this process may run on (its CPU binding), shared among
// the ranks of its node.
#pragma once

#include <algorithm>
#include <thread>

#include "core/thread_affinity.hpp"

namespace ddl {

inline int default_threads(int ranks_on_this_node) {
  const int allowed = static_cast<int>(allowed_cpus().size());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int share = std::max(1, cores / std::max(1, ranks_on_this_node));
  return allowed > 0 ? std::min(allowed, share) : share;
}

// The cores a rank's compute threads leave on its node, its share of them (0 where none is left).
inline int cores_left_to_a_rank(int ranks_on_this_node, int threads) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int ranks = std::max(1, ranks_on_this_node);
  return std::max(0, cores - ranks * threads) / ranks;
}

}  // namespace ddl
