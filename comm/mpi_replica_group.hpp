// The replica group of a data-parallel run over MPI. For now gradients are averaged with MPI_Allreduce;
// the project's own ring all-reduce replaces it in the data-parallel work.
#pragma once

#include "comm/communicator.hpp"
#include "core/train/replica_group.hpp"

namespace ddl {

class MpiReplicaGroup : public ReplicaGroup {
 public:
  explicit MpiReplicaGroup(const Communicator& comm) : comm_(comm) {}

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void broadcast(std::span<float> values, int root) override { comm_.broadcast(values, root); }
  void average(std::span<float> gradients) override;
  void sum(std::span<double> values) override { comm_.allreduce_sum(values); }
  void check_same(const std::string& what, std::uint64_t fingerprint) override;

 private:
  const Communicator& comm_;
};

}  // namespace ddl
