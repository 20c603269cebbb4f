// Owns MPI's lifetime for a process: initialises it with MPI_THREAD_SERIALIZED (the gradient reducer's
// communication thread and the main thread call MPI, never at the same time) and finalises it on
// destruction. One per executable, created first in main. Works when the
// program is started without mpirun too (an MPI singleton of one rank).
#pragma once

namespace ddl {

class MpiEnvironment {
 public:
  MpiEnvironment(int* argc, char*** argv);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
};

// Ends every rank of MPI_COMM_WORLD with this exit code; for the error boundary in main.
[[noreturn]] void abort_all_ranks(int code);

}  // namespace ddl
