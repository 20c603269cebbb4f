// --strategy auto | data | pipeline: the planner's choice (core/plan) turned into the options a manual run
// would give (--pipeline-stages, --tensor-parallel, --micro-batches, --partition, --tensor-split,
// --batch-size), so that ddl_train builds every run the same way, and the plan's report for the header.
// The global batch is the one plain data parallelism would train: --batch-size times the ranks.
#pragma once

#include <string>

#include "core/plan/search.hpp"
#include "launch/train_options.hpp"

namespace ddl {

struct StrategyPlan {
  TrainOptions options;  // the given ones, with the chosen layout
  Plan chosen;
  std::string report;
};

// memory_limit_bytes: per rank (0: none). Throws InputError when no layout fits.
StrategyPlan plan_strategy(const TrainOptions& options, const Profile& profile, const Cluster& cluster,
                           double memory_limit_bytes);

// The node's memory divided among its ranks, less a tenth for the system (/proc/meminfo), 0 if unknown.
double default_memory_limit(int ranks_on_this_node);

}  // namespace ddl
