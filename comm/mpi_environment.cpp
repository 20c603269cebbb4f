#include "comm/mpi_environment.hpp"

#include <chrono>
#include <thread>

#include <mpi.h>

#include <cstdlib>

#include "comm/mpi_error.hpp"
#include "core/error.hpp"

namespace ddl {

MpiEnvironment::MpiEnvironment(int* argc, char*** argv) {
  int provided = 0;
  check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED) throw Error("this MPI library cannot be called from more than one thread");
  // Errors raised on requests and files go to MPI_COMM_SELF's (MPI 4) or MPI_COMM_WORLD's handler, fatal
  // by default: Open MPI then aborts the job before ddl can say why (a request freed while an error
  // unwinds once hid every message). Returned codes are checked with check_mpi instead.
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_SELF})
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

MpiEnvironment::~MpiEnvironment() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void abort_all_ranks(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int size = 1;
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) {
    // mpirun forwards a rank's output in pieces (Open MPI 5: 128 bytes) and prints its own abort notice as
    // soon as it learns of the abort, which can cut the rank's error line in two: let the line go first.
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::exit(code);
}

}  // namespace ddl
