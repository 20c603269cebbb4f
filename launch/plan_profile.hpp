// The planner's profile, measured at start on the job's own ranks (--strategy auto): every layer's forward
// and backward time at the per-rank batch and at a quarter of it, on the rank's threads (a few steps of the
// whole model, every rank at once, as training will load the cores), fitted as a fixed time per call plus
// a time per image, and at one image, which a micro-batch may hold; the layers that can split, timed split
// in two where tensor groups may form; its sizes, the optimizer's step, and the links within a node and
// between nodes: the steps of the all-reduce training runs and pipeline messages, each timed at sizes from
// 1 KB up.
// A link that cannot be measured here (one node, or one rank per node) takes the figures given with
// --link-within / --link-between, or defaults, and the report says so.
#pragma once

#include <string>

#include "comm/communicator.hpp"
#include "core/context.hpp"
#include "core/plan/profile.hpp"
#include "launch/train_options.hpp"
#include "models/registry.hpp"

namespace ddl {

struct MeasuredProfile {
  Profile profile;
  // For the plan's report, a line each ("  ...\n"): the links measured or assumed, and where the split layers
  // were timed split, what of them stays whole.
  std::string report;
};

struct MeasuredLinks {
  Link within, between;
  std::string text;  // one line: what was measured and what was assumed
  bool within_measured = false, between_measured = false;
};

// Collective over `world`: the links within the largest node and between nodes, the slowest rank's, from
// all-reduces whose ring steps are 1 KB up to those of a `probe_bytes` all-reduce, and messages of the
// same sizes. At start the model's gradients, within 1 and 64 MB (no more than training's own all-reduce
// holds: the hierarchical one's shared window is twice it); a re-plan, which a slow link makes pay for the
// probe during training, up to 1 MB.
MeasuredLinks measure_links(const TrainOptions& options, const Communicator& world, std::size_t probe_bytes);
constexpr std::size_t kProbeBytesWhileTraining = 1 << 20, kLargestProbeBytes = 64 << 20;

// Collective over `world`; every rank returns the same figures (averaged over the ranks). `one_node`: the
// job's ranks all on one node, where the planner may choose stage 3 (the probe times its gathers).
MeasuredProfile measure_profile(const TrainOptions& options, const ModelConfig& config, const Communicator& world,
                                dnnl::memory::data_type compute_type, bool one_node);

}  // namespace ddl
