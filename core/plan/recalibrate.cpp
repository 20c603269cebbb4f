#include "core/plan/recalibrate.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace ddl {

Profile recalibrated(const Profile& profile, const Prediction& predicted, std::span<const double> measured_s) {
  if (predicted.layers.size() != profile.layers.size() || measured_s.size() != profile.layers.size())
    throw Error("recalibrated: the profile, the prediction and the measurements cover different layers");
  constexpr double kNegligible = 1e-6;  // seconds per step: the timer's own cost
  Profile p = profile;
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    const LayerPrediction& lp = predicted.layers[i];
    if (lp.compute_s < kNegligible || measured_s[i] <= 0) continue;
    const double collectives = lp.seconds - lp.compute_s;
    const double factor =
        std::clamp((measured_s[i] - collectives) / lp.compute_s, 1 / kMaxRecalibration, kMaxRecalibration);
    p.layers[i].scale(factor);
  }
  return p;
}

Profile with_links_calibrated(const Profile& profile, const Prediction& predicted, double measured_step_s) {
  Profile p = profile;
  if (predicted.comm_s <= 0 || measured_step_s <= 0) return p;
  const double rest = predicted.step_s - predicted.comm_s;
  // Never faster than the probe measured them: steps timed before a link slowed down must not cancel
  // what the probe sees now.
  const double factor = std::clamp((measured_step_s - rest) / predicted.comm_s, 1.0, kMaxRecalibration);
  for (Link* link : {&p.within_node, &p.between_nodes}) *link = link->slowed(factor);
  p.gather_extra_s *= factor;
  return p;
}

}  // namespace ddl
