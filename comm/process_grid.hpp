// The communicators of one layout, built once from it: the ranks a rank talks to along each axis of the
// grid D x S x T (core/plan/layout.hpp), each timed by the world's hang detector under a name that says
// which ranks it holds. Collective over `world`; released before the next layout's grid is built.
#pragma once

#include <optional>

#include "comm/communicator.hpp"
#include "comm/mpi_tensor_group.hpp"
#include "core/plan/layout.hpp"

namespace ddl {

class ProcessGrid {
 public:
  ProcessGrid(const Communicator& world, const Layout& layout);
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  const GridPosition& position() const { return position_; }
  // The stages of this replica (of this rank's tensor index).
  const Communicator& pipeline() const { return pipeline_; }
  // The replicas of this stage (likewise): the ranks that average gradients.
  const Communicator& stage_replicas() const { return stage_replicas_; }
  // The ranks that split this stage's layers.
  const Communicator& tensor() const { return tensor_; }
  // Every rank of this replica: they write a checkpoint in turn.
  const Communicator& replica_ranks() const { return replica_ranks_; }
  // With T > 1: the split layers' collectives.
  MpiTensorGroup* tensor_group() { return tensor_group_ ? &*tensor_group_ : nullptr; }

 private:
  GridPosition position_;
  Communicator pipeline_, stage_replicas_, tensor_, replica_ranks_;
  std::optional<MpiTensorGroup> tensor_group_;
};

}  // namespace ddl
