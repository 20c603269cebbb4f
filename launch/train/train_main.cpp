// ddl_train's run: trains a registered model on an HDF5 image dataset, on one process or, under mpirun, as a
// grid of ranks: D data-parallel replicas (averaging gradients every step) of an S-stage pipeline (each
// stage a contiguous run of layers on its own rank) whose layers may split across T ranks. The job
// (launch/train/job.hpp) outlives its layouts; each layout trains in a session of its own
// (launch/train/session.hpp), the next one built when a re-plan moves the job.
//
// This file is the error boundary: set-up errors are agreed on by all ranks and end every rank with exit
// code 2; errors during training abort the whole job with the failing rank's message.
#include "launch/train/train_main.hpp"

#include <cstdio>
#include <optional>

#include "comm/communicator.hpp"
#include "comm/hang_detector.hpp"
#include "comm/mpi_environment.hpp"
#include "core/data/hdf5.hpp"
#include "launch/error_line.hpp"
#include "launch/stop_signals.hpp"
#include "launch/train/checkpoints.hpp"
#include "launch/train/job.hpp"
#include "launch/train/layout_choice.hpp"
#include "launch/train/session.hpp"
#include "launch/train/training_loop.hpp"
#include "launch/train_options.hpp"

namespace ddl {
namespace {

// While the job asks for another layout (a re-plan's move), build its session and train on.
int train_every_layout(Job& job, std::optional<Session>& session, StopSignals& stop_signals) {
  SessionEnd end = train(job, *session, stop_signals);
  while (end.next_layout) {
    session.reset();  // the previous layout's memory, communicators and loaders go first
    session.emplace(job, std::move(*end.next_layout), false);
    take_packed_state(job, *session, std::move(end.state_image));
    end = train(job, *session, stop_signals);
  }
  return end.exit_code;
}

}  // namespace

int train_main(int argc, char** argv, const InjectedFaults& faults) {
  StopSignals stop_signals;  // before any thread starts
  h5::no_cleanup_at_exit();
  MpiEnvironment mpi(&argc, &argv);
  std::optional<Communicator> world;
  std::optional<HangDetector> hang;
  std::optional<Job> job;
  std::optional<Session> session;
  std::string plan_report;  // --plan-only: all it prints
  // Set-up: every rank learns whether any rank failed, so all stop together with exit code 2.
  std::exception_ptr setup_error;
  try {
    world.emplace();
    auto options = parse_train_options(argc, argv);
    if (!options) return world->any(false) ? 2 : 0;
    hang.emplace(WaitLimits(options->timeout_seconds), "rank " + std::to_string(world->rank()),
                 &stop_signals.received());
    world->watch(&*hang, "all ranks");
    job.emplace(*options, *world);
    job->faults = faults;
    ChosenLayout first = first_layout(*job);
    if (job->options.plan_only) {
      plan_report = first.plan_report;
    } else {
      session.emplace(*job, std::move(first), true);
      // Last, after every collective of the set-up: a check that only rank 0 makes must not leave the
      // other ranks in a collective that rank 0 never joins (they all agree on set-up errors after this).
      job->prepare_outputs();
    }
  } catch (...) {
    setup_error = std::current_exception();
  }
  if (!world) {
    print_error_line("ddl_train", nullptr, describe_exception(setup_error));
    abort_all_ranks(2);
  }
  try {
    if (world->any(setup_error != nullptr)) {
      if (setup_error) print_error_line("ddl_train", &*world, describe_exception(setup_error));
      return 2;
    }
    if (!session) {
      if (world->rank() == 0) std::printf("%s", plan_report.c_str());
      return 0;
    }
    if (!resume(*job, *session) || !initialize(*job, *session)) return 2;
    return train_every_layout(*job, session, stop_signals);
  } catch (...) {
    fail_during_training(*world, std::current_exception());
  }
}

}  // namespace ddl
