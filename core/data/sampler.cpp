#include "core/data/sampler.hpp"

#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace ddl {

std::vector<std::size_t> epoch_permutation(std::size_t n, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  Rng rng = Rng::derived(seed, 0xe90c, epoch);
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

std::vector<std::size_t> training_indices(std::size_t n, std::uint64_t seed, std::uint64_t epoch, int replica,
                                          int replicas, std::size_t batch) {
  if (replicas < 1 || replica < 0 || replica >= replicas || batch == 0) throw Error("training_indices: bad arguments");
  const std::size_t steps = n / (static_cast<std::size_t>(replicas) * batch);
  if (steps == 0)
    throw InputError("the training set has " + std::to_string(n) + " images, fewer than one global batch of " +
                     std::to_string(replicas * batch));
  const auto order = epoch_permutation(n, seed, epoch);
  // Step s of replica r is order[(s * replicas + r) * batch ...]: every step's global batch is a
  // contiguous slice of the permutation, the same images a single process with batch x replicas would use.
  std::vector<std::size_t> mine;
  mine.reserve(steps * batch);
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t begin = (s * replicas + replica) * batch;
    mine.insert(mine.end(), order.begin() + begin, order.begin() + begin + batch);
  }
  return mine;
}

std::vector<std::size_t> evaluation_indices(std::size_t n, int replica, int replicas) {
  const std::size_t begin = n * replica / replicas, end = n * (replica + 1) / replicas;
  std::vector<std::size_t> mine(end - begin);
  std::iota(mine.begin(), mine.end(), begin);
  return mine;
}

}  // namespace ddl
