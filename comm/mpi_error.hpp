// Turns an MPI return code into an exception that names the call and MPI's own description.
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.hpp"

namespace ddl {

inline std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

inline void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw Error(std::string(call) + " failed: " + mpi_error_text(rc));
}

}  // namespace ddl
