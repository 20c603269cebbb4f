#include "comm/wait_limits.hpp"

#include <algorithm>
#include <cstdio>

namespace ddl {

bool WaitLimits::slow_by_nature(const std::string& kind) const {
  return starting_ || kind.rfind(kCheckpointPhase, 0) == 0;
}

void WaitLimits::record(Seen& seen, double seconds) {
  if (++seen.count > kLearningWaits) seen.slowest = std::max(seen.slowest, seconds);
}

double WaitLimits::limit(const std::string& kind) const {
  if (fixed_) return slow_by_nature(kind) && *fixed_ > 0 ? std::max(*fixed_, kStartupSeconds) : *fixed_;
  const auto it = waits_.find(kind);
  if (it == waits_.end() || it->second.count <= kLearningWaits || steps_.count <= kLearningWaits)
    return kStartupSeconds;
  return std::max({kFloorSeconds, kFactor * it->second.slowest, kFactor * steps_.slowest});
}

std::string WaitLimits::explain(const std::string& kind) const {
  char text[160];
  if (fixed_ && limit(kind) != *fixed_)
    std::snprintf(text, sizeof text, "--timeout %g, but %.0f s while the job starts or writes a checkpoint", *fixed_,
                  kStartupSeconds);
  else if (fixed_)
    std::snprintf(text, sizeof text, "--timeout %g", *fixed_);
  else if (limit(kind) == kStartupSeconds)
    std::snprintf(text, sizeof text, "--timeout auto: %.0f s while the job starts", kStartupSeconds);
  else
    std::snprintf(text, sizeof text, "--timeout auto: %.0f s, from %g x the slowest such wait or step so far, at least %.0f s",
                  limit(kind), kFactor, kFloorSeconds);
  return text;
}

void WaitLimits::waited(const std::string& kind, double seconds) {
  if (!fixed_) record(waits_[kind], seconds);
}

void WaitLimits::step_took(double seconds) {
  starting_ = false;
  if (!fixed_) record(steps_, seconds);
}

}  // namespace ddl
