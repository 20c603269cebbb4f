// Checks that the replicas of one model (or stage) still hold the same values. Equal initial weights and
// equal averaged gradients should keep them equal, but a non-deterministic kernel, a fault in a new
// collective or a flipped bit on one node makes them drift silently, and the result is a model no single
// rank trained. One 64-bit checksum per rank in one all-gather when they agree (the usual case); only on a
// mismatch one more per tensor, to name it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace ddl {

struct NamedValues {
  std::string name;
  std::span<const float> floats;
  std::span<const std::uint64_t> words;
};

// Collective over `replicas`. Empty when every rank holds the same values; else which ranks differ from
// the group's rank 0 (as world ranks) and in which tensor first, e.g. "rank 3 differs from rank 0 in
// 4.weight (and 2 more tensors)".
std::string replica_difference(const Communicator& replicas, const std::vector<NamedValues>& tensors);

}  // namespace ddl
