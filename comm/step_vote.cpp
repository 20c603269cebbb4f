#include "comm/step_vote.hpp"

#include "comm/mpi_error.hpp"

namespace ddl {
namespace {

constexpr int kStop = 1, kCheckpoint = 2;

}  // namespace

StepVote::StepVote(const Communicator& ranks) : comm_(ranks.get()) {
  comm_.watch(ranks.hang_detector(), "all ranks (step vote)");
}

StepVote::~StepVote() {
  // Only open when unwinding from an error, on the way to aborting the job.
  if (request_ != MPI_REQUEST_NULL) MPI_Request_free(&request_);
}

StepAsks StepVote::collect() {
  if (request_ == MPI_REQUEST_NULL) return {};
  const auto wait = comm_.waiting("the step vote (stop, checkpoint)");
  check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait (step vote)");
  return {(vote_ & kStop) != 0, (vote_ & kCheckpoint) != 0};
}

StepAsks StepVote::step(const StepAsks& here) {
  const StepAsks agreed = collect();
  vote_ = (here.stop ? kStop : 0) | (here.checkpoint ? kCheckpoint : 0);
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, &vote_, 1, MPI_INT, MPI_BOR, comm_.get(), &request_),
            "MPI_Iallreduce (step vote)");
  return agreed;
}

StepAsks StepVote::finish() { return collect(); }

}  // namespace ddl
