// The planner's search (Baligodugula and Amsaad's Algorithm 1, 2025, over ddl's layouts): every grid
// D x S x T of the ranks, micro-batches from {1, 2, 4, 8, 16, 32} (or the number fixed), every cut of the
// layers into S stages (or, where there are too many, the cut balanced by time and memory), and for T > 1
// every split the profile allows (any subset of the splittable dense layers, or the last k of them where
// there are many; every transformer block).
// Each layout is weighed with its optimizer state whole or sharded, and with its activations kept,
// recomputed on every stage, or recomputed on just the stages that would not fit the memory limit.
// Layouts over the memory limit are dropped; the least predicted step time wins, unless a plainer layout is
// predicted within kDataParallelMargin of it: the cost model's own error is larger than that, and the
// plainer layout has fewer ways to be slow that the model does not know. Data parallelism is plainer than
// a pipeline or a split, state kept whole plainer than sharded, and activations kept than recomputed.
#pragma once

#include <functional>
#include <optional>

#include "core/plan/cost_model.hpp"

namespace ddl {

struct Constraints {
  double memory_limit_bytes = 0;  // per rank; 0: none
  // > 0: fixed to this value.
  int replicas = 0, stages = 0, tensor = 0, micro_batches = 0;
  int min_stages = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  // every layout's
  double bucket_bytes = 0;  // every layout with --bucket-mb
  // The optimizer-state sharding the search may give a layout of several replicas and no split (0: whole;
  // 1: ZeRO's stage 1), and whether it may, or must, recompute activations where there is no split.
  std::vector<int> shard_states{0};
  bool may_recompute = false, must_recompute = false;
};

struct Plan {
  Layout layout;
  Prediction prediction;
};

constexpr double kDataParallelMargin = 0.03;

// The layers a group of grid.tensor ranks may split: the dense layers it divides, and the transformer blocks
// where it divides every one (they split all together), else none.
struct SplittableLayers {
  std::vector<std::size_t> dense, blocks;
};
SplittableLayers splittable_layers(const Profile& profile, const Layout& grid);

struct SearchResult {  // what the search found
  std::optional<Plan> best;           // the choice
  std::optional<Plan> fastest;        // the least predicted step time
  std::optional<Plan> best_data;      // S = T = 1
  std::optional<Plan> best_pipeline;  // D = T = 1
  std::size_t considered = 0, over_memory = 0;
};

SearchResult plan_layouts(const Profile& profile, const Cluster& cluster, int global_batch, const Constraints& limits);

// Calls `visit` with every layout plan_layouts considers and its prediction, memory limit aside.
void for_each_layout(const Profile& profile, const Cluster& cluster, int global_batch, const Constraints& limits,
                     const std::function<void(const Plan&)>& visit);

}  // namespace ddl
