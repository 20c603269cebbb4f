// A session's training: its epochs, from where the job stands (a resumed epoch from its next step), until
// the job ends, a signal stops it, or a re-plan moves it to another layout.
#pragma once

#include <exception>
#include <optional>
#include <vector>

#include "launch/stop_signals.hpp"
#include "launch/train/job.hpp"
#include "launch/train/session.hpp"

namespace ddl {

struct SessionEnd {
  int exit_code = 0;
  std::optional<ChosenLayout> next_layout;  // a re-plan's move: the job goes on in this layout
  std::vector<char> state_image;            // the job's state in memory, for the next layout's session
};

// Collective over the job's ranks. A failure during training ends the whole job (fail_during_training).
SessionEnd train(Job& job, Session& session, StopSignals& stop_signals);

// A failure during training: its message goes out first, then the whole job ends at once. Unwinding the
// communication objects first could wait forever for ranks that are not coming (the bucket thread's
// all-reduce that a peer left), and a peer waiting for this rank is in a collective only an abort ends.
[[noreturn]] void fail_during_training(const Communicator& world, std::exception_ptr error);

}  // namespace ddl
