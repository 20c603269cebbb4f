// The one line a ddl program prints for an error on stderr ("ddl_train: error (rank 1): ..."), the rank
// named when the job has several, and an exception's text for it.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "comm/communicator.hpp"

namespace ddl {

inline void print_error_line(const char* program, const Communicator* world, const std::string& message) {
  if (world && world->size() > 1)
    std::fprintf(stderr, "%s: error (rank %d): %s\n", program, world->rank(), message.c_str());
  else
    std::fprintf(stderr, "%s: error: %s\n", program, message.c_str());
  std::fflush(stderr);
}

inline std::string describe_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const dnnl::error& err) {
    return std::string("oneDNN: ") + err.what() + " (status " + std::to_string(err.status) + ")";
  } catch (const std::exception& err) {
    return err.what();
  }
}

}  // namespace ddl
