// Faults that tests make and one machine cannot: a replica that drifts, links that slow down during a run.
// ddl_train injects none; its test build (tests/launch/ddl_train_faults.cpp) takes them from the environment
// and hands them to train_main.
#pragma once

#include <functional>
#include <span>

#include "core/plan/profile.hpp"

namespace ddl {

struct InjectedFaults {
  // After each training step (counted over the job), on every rank: `params` are this rank's model's.
  std::function<void(std::span<float> params, int world_rank, unsigned long long step)> after_step;
  // On each link a re-plan has measured, at the step of that re-plan.
  std::function<void(Link& link, unsigned long long step)> measured_link;
};

}  // namespace ddl
