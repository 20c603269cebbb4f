// How ddl_train cuts a model's layers into pipeline stages: the user's --partition, checked, or by
// default a cut balanced by each layer's measured time and memory (core/plan/balanced_partition.hpp's
// balanced_partition over figures that every stage measures on its share of an even cut).
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/plan/layout.hpp"
#include "launch/train_options.hpp"
#include "models/registry.hpp"

namespace ddl {

struct StagePartition {
  std::vector<std::size_t> counts;  // layers per stage
  std::string report;               // one line per stage, for the run's header
};

LayerRange stage_range(const std::vector<std::size_t>& counts, int stage);

// The layout's cut, or where it has none, the cut measured on these ranks. Collective over `world` (the
// measured cut is world rank 0's); `pipeline` holds this replica's stages. `whole`: the model defined (not
// finalized), for its layers and the weights they share.
StagePartition choose_partition(const TrainOptions& options, const Layout& layout, const ModelConfig& config,
                                const Model& whole, int stage, const Communicator& pipeline, const Communicator& world,
                                Context& ctx);

}  // namespace ddl
