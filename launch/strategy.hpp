// --strategy auto | data | pipeline: the planner's choice of layout (core/plan) for a job, and its report
// for the run's header. The global batch is the one plain data parallelism would train: --batch-size
// times the ranks.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/plan/search.hpp"
#include "launch/train_options.hpp"

namespace ddl {

struct PlanReport {
  Plan chosen;       // the layout, and what the cost model predicts for it
  std::string text;  // the alternatives considered and the chosen layout's layers, for the header
};

// memory_limit_bytes: per rank (0: none), of which the training images kept in memory take images_bytes.
// Throws InputError when no layout fits.
PlanReport plan_strategy(const TrainOptions& options, const Profile& profile, const Cluster& cluster,
                         double memory_limit_bytes, double images_bytes = 0);

// Whether the planner may split layers across tensor groups under these options: only --strategy auto, not
// with a layer-wise optimizer (LARS, LAMB: their trust ratios need a layer's whole parameters), and not with
// --tensor-parallel 1.
bool planner_may_split(const TrainOptions& options);

// The ZeRO stages (--shard-state) the planner weighs under these options, for a cluster of one node or more.
std::vector<int> shard_states_to_plan(const TrainOptions& options, bool one_node);

// A rank's memory limit in bytes: --memory-limit, or its node's memory divided among `ranks_per_node` ranks,
// less a tenth for the system (`meminfo` as /proc/meminfo reads; 0 if it does not say).
double memory_limit_bytes(const TrainOptions& options, std::istream& meminfo, int ranks_per_node);
// memory_limit_bytes with this node's /proc/meminfo, the smallest over `world`, so that every rank plans and
// caches alike. Collective.
double rank_memory_limit(const TrainOptions& options, int ranks_per_node, const Communicator& world);

}  // namespace ddl
