// Which images a replica reads in an epoch. Every replica derives the same permutation from (seed, epoch)
// and takes its own part, so no coordination is needed and no replica reads another's images.
//  - Training: the permutation is cut into steps of replicas x batch images; the remainder (fewer than
//    replicas x batch images) is left out this epoch, as every replica must run the same number of steps.
//    It differs from epoch to epoch, so over a run every image is used.
//  - Evaluation: every image exactly once, in order, replica r taking the r-th contiguous part.
#pragma once

#include <cstdint>
#include <vector>

namespace ddl {

std::vector<std::size_t> epoch_permutation(std::size_t n, std::uint64_t seed, std::uint64_t epoch);

// Training indices of `replica` (0-based) among `replicas` for this epoch: steps x batch of them.
std::vector<std::size_t> training_indices(std::size_t n, std::uint64_t seed, std::uint64_t epoch, int replica,
                                          int replicas, std::size_t batch);

std::vector<std::size_t> evaluation_indices(std::size_t n, int replica, int replicas);

}  // namespace ddl
