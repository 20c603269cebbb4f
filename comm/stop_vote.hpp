// Whether any rank has been asked to stop (SIGTERM from Slurm's pre-emption, SIGINT from a user): every
// rank must stop after the same step, or the others wait for it forever. Each step casts this rank's
// vote in a non-blocking MPI_Iallreduce (logical or) and collects the previous step's result, so the
// agreement costs no wait: all ranks stop one step after the first signal, at the same step.
#pragma once

#include <mpi.h>

#include "comm/communicator.hpp"

namespace ddl {

class StopVote {
 public:
  // Duplicates `ranks`, so the votes never mix with other collectives.
  explicit StopVote(const Communicator& ranks);
  ~StopVote();
  StopVote(const StopVote&) = delete;
  StopVote& operator=(const StopVote&) = delete;

  // Collective, once per step on every rank: true when some rank voted to stop in the previous call.
  bool step(bool stop_here);
  // Collective: collects the last vote (true when some rank voted to stop) and casts none.
  bool finish();

 private:
  bool collect();

  Communicator comm_;
  int vote_ = 0;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace ddl
