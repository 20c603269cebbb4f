// What every rank must do after the same step, though one rank alone may know it: stop (SIGTERM from
// Slurm's pre-emption, SIGINT from a user; the others would wait for a stopped rank forever), or write a
// checkpoint (--checkpoint-every by time: each rank's own clock). Each step casts this rank's asks in a
// non-blocking MPI_Iallreduce (bitwise or) and collects the previous step's result, so the agreement
// costs no wait: all ranks act one step after the first rank asked, at the same step.
#pragma once

#include <mpi.h>

#include "comm/communicator.hpp"

namespace ddl {

struct StepAsks {
  bool stop = false;
  bool checkpoint = false;
};

class StepVote {
 public:
  // Duplicates `ranks`, so the votes never mix with other collectives.
  explicit StepVote(const Communicator& ranks);
  ~StepVote();
  StepVote(const StepVote&) = delete;
  StepVote& operator=(const StepVote&) = delete;

  // Collective, once per step on every rank: what some rank asked in the previous call.
  StepAsks step(const StepAsks& here);
  // Collective: collects the last vote and casts none.
  StepAsks finish();

 private:
  StepAsks collect();

  Communicator comm_;
  int vote_ = 0;  // bits: 1 stop, 2 checkpoint
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace ddl
