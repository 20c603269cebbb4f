#include "comm/stop_vote.hpp"

#include "comm/mpi_error.hpp"

namespace ddl {

StopVote::StopVote(const Communicator& ranks) : comm_(ranks.get()) {
  comm_.watch(ranks.hang_detector(), "all ranks (stop vote)");
}

StopVote::~StopVote() {
  // Only open when unwinding from an error, on the way to aborting the job.
  if (request_ != MPI_REQUEST_NULL) MPI_Request_free(&request_);
}

bool StopVote::collect() {
  if (request_ == MPI_REQUEST_NULL) return false;
  const auto wait = comm_.waiting("the stop vote");
  check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait (stop vote)");
  return vote_ != 0;
}

bool StopVote::step(bool stop_here) {
  const bool stop = collect();
  vote_ = stop_here ? 1 : 0;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, &vote_, 1, MPI_INT, MPI_LOR, comm_.get(), &request_),
            "MPI_Iallreduce (stop vote)");
  return stop;
}

bool StopVote::finish() { return collect(); }

}  // namespace ddl
