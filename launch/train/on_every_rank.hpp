// Set-up steps that one rank may fail alone (its CPU, its files), made to fail on every rank with it.
#pragma once

#include <exception>
#include <string>

#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace ddl {

// Runs `step` and makes every rank fail with it: the ranks must not part before the collectives that
// follow, which a failed rank would never join.
template <typename Step>
void on_every_rank(const Communicator& world, const std::string& what, Step step) {
  std::string failure;
  try {
    step();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (world.any(!failure.empty())) throw InputError(failure.empty() ? what + " failed on another rank" : failure);
}

}  // namespace ddl
