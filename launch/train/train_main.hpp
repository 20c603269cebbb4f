// ddl_train's whole run, from the command line to the exit code: ddl_train's main, and its test build's
// with faults injected (injected_faults.hpp).
#pragma once

#include "launch/train/injected_faults.hpp"

namespace ddl {

int train_main(int argc, char** argv, const InjectedFaults& faults);

}  // namespace ddl
