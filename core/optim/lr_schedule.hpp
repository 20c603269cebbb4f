// Learning rate as a function of training progress (in epochs, fractional): a base schedule (constant,
// step decay, cosine or polynomial decay to zero over the run) times an optional linear warm-up.
#pragma once

#include <string>

namespace ddl {

enum class LrPolicy { constant, step, cosine, poly };

struct LrSchedule {
  LrPolicy policy = LrPolicy::constant;
  float base_lr = 1e-3f;
  float warmup_epochs = 0.0f;
  float step_epochs = 30.0f;  // step: multiply by gamma every step_epochs
  float gamma = 0.1f;
  float total_epochs = 1.0f;  // cosine, poly: reach 0 here
  float power = 2.0f;         // poly: base (1 - epoch / total_epochs)^power (LARS's usual schedule)

  float at(double epoch) const;
  std::string describe() const;
};

}  // namespace ddl
