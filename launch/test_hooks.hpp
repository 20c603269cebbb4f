// The environment variables through which tests make faults that one machine cannot make otherwise. Each is
// read where it acts; unset (as in every user's run) it changes nothing.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "core/plan/profile.hpp"

namespace ddl {

// DDL_TEST_PERTURB=RANK:STEP: adds 1 to that world rank's first parameter after that training step
// (counted over the whole job), to make one replica drift.
struct ReplicaPerturbation {
  int rank = -1;
  unsigned long long step = 0;
  static ReplicaPerturbation from_environment() {
    ReplicaPerturbation p;
    if (const char* text = std::getenv("DDL_TEST_PERTURB"))
      if (std::sscanf(text, "%d:%llu", &p.rank, &p.step) != 2) p.rank = -1;
    return p;
  }
};

// DDL_TEST_SLOW_LINKS=STEP:FACTOR: divides the measured bandwidths by FACTOR and multiplies the latencies
// by it at re-plans from step STEP on, to slow the links down without a network to slow.
struct LinkSlowdown {
  unsigned long long from_step = 0;
  double factor = 1;
  static LinkSlowdown from_environment() {
    LinkSlowdown s;
    if (const char* text = std::getenv("DDL_TEST_SLOW_LINKS"))
      if (std::sscanf(text, "%llu:%lf", &s.from_step, &s.factor) != 2 || s.factor <= 0) s = {};
    return s;
  }
  void apply(Link& link, unsigned long long step) const {
    if (step >= from_step) link = link.slowed(factor);
  }
};

}  // namespace ddl
