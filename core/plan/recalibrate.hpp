// Re-profiling during training (Baligodugula and Amsaad, 2025): the layers' times measured while a layout
// trains, against what the cost model predicted for them there, make the profile that the next plan is made
// from. Another job that takes a node's cores shows up here; a slower network shows up in the links, measured
// again.
#pragma once

#include <span>

#include "core/plan/cost_model.hpp"
#include "core/plan/profile.hpp"

namespace ddl {

// The profile with each layer's times scaled by measured / predicted compute: `measured_s` holds each
// layer's seconds per step under the layout of `predicted` (its split collectives included, which the
// prediction's compute_s leaves out). A layer predicted to take next to nothing keeps its times, and no
// factor goes beyond kMaxRecalibration either way: one odd step must not make a layer free or endless.
Profile recalibrated(const Profile& profile, const Prediction& predicted, std::span<const double> measured_s);

// The profile with both links' latency and seconds per byte (and stage 3's gathers' cost beyond them)
// scaled so that `predicted` (the current layout's, from this profile) takes the step measured under it:
// whatever the step took beyond its compute is taken as communication and waiting for it, which the links'
// probe (a few all-reduces between steps) does not always see (MPI over TCP with small messages, a job
// sharing the network). Only ever slower than the probe's figures, by at most kMaxRecalibration; unchanged
// where the layout communicates nothing.
Profile with_links_calibrated(const Profile& profile, const Prediction& predicted, double measured_step_s);

constexpr double kMaxRecalibration = 16;

}  // namespace ddl
