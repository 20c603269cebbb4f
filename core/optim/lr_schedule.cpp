#include "core/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace ddl {

float LrSchedule::at(double epoch) const {
  double lr = base_lr;
  switch (policy) {
    case LrPolicy::constant:
      break;
    case LrPolicy::step:
      lr *= std::pow(static_cast<double>(gamma), std::floor(epoch / step_epochs));
      break;
    case LrPolicy::cosine: {
      const double t = std::min(1.0, epoch / static_cast<double>(total_epochs));
      lr *= 0.5 * (1.0 + std::cos(M_PI * t));
      break;
    }
    case LrPolicy::poly:
      lr *= std::pow(1.0 - std::min(1.0, epoch / static_cast<double>(total_epochs)), static_cast<double>(power));
      break;
  }
  if (warmup_epochs > 0 && epoch < warmup_epochs) lr *= std::max(epoch / warmup_epochs, 1e-3);
  return static_cast<float>(lr);
}

std::string LrSchedule::describe() const {
  static const char* names[] = {"constant", "step", "cosine", "poly"};
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s lr=%g warmup=%g epochs", names[static_cast<int>(policy)], base_lr, warmup_epochs);
  const std::size_t used = std::strlen(buf);
  if (policy == LrPolicy::poly) std::snprintf(buf + used, sizeof buf - used, " power=%g", power);
  return buf;
}

}  // namespace ddl
