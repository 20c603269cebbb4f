#include "comm/mpi_replica_group.hpp"

#include "core/error.hpp"

namespace ddl {

void MpiReplicaGroup::average(std::span<float> gradients) {
  if (comm_.size() == 1) return;
  comm_.allreduce_sum(gradients);
  const float scale = 1.0f / static_cast<float>(comm_.size());
  for (auto& g : gradients) g *= scale;
}

void MpiReplicaGroup::check_same(const std::string& what, std::uint64_t fingerprint) {
  const auto all = comm_.allgather(fingerprint);
  std::string differ;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty()) throw InputError(what + " differs between rank 0 and rank(s) " + differ);
}

}  // namespace ddl
