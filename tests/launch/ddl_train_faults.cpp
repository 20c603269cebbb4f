// ddl_train's test build: the same run, with faults injected that one machine cannot make otherwise, taken
// from the environment (unset, it is ddl_train):
//   DDL_TEST_PERTURB=RANK:STEP      adds 1 to that world rank's first parameter after that training step
//                                   (counted over the whole job), to make one replica drift;
//   DDL_TEST_SLOW_LINKS=STEP:FACTOR divides the bandwidths a re-plan measured by FACTOR and multiplies their
//                                   latencies by it from step STEP on, to slow the links without a network.
#include <cstdio>
#include <cstdlib>

#include "launch/train/train_main.hpp"

namespace ddl {
namespace {

InjectedFaults faults_from_environment() {
  InjectedFaults faults;
  int rank = -1;
  unsigned long long step = 0;
  if (const char* text = std::getenv("DDL_TEST_PERTURB"); text && std::sscanf(text, "%d:%llu", &rank, &step) == 2)
    faults.after_step = [rank, step](std::span<float> params, int world_rank, unsigned long long now) {
      if (world_rank == rank && now == step) params[0] += 1.0f;
    };
  unsigned long long from_step = 0;
  double factor = 1;
  if (const char* text = std::getenv("DDL_TEST_SLOW_LINKS");
      text && std::sscanf(text, "%llu:%lf", &from_step, &factor) == 2 && factor > 0)
    faults.measured_link = [from_step, factor](Link& link, unsigned long long now) {
      if (now >= from_step) link = link.slowed(factor);
    };
  return faults;
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) { return ddl::train_main(argc, argv, ddl::faults_from_environment()); }
