// The optimizer the options name, built for a model's parameters: apart from the option parser, which builds
// nothing.
#pragma once

#include <memory>

#include "core/model.hpp"
#include "core/optim/layerwise.hpp"
#include "core/optim/optimizer.hpp"
#include "launch/train_options.hpp"

namespace ddl {

// The optimizer the options name, for the model's parameters; with a shard (--shard-state), a
// ShardedOptimizer for that shard of them, the layer-wise ones adding their arrays' norms over the replicas.
std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& options, const Model& model, LayerwiseShard shard = {});

}  // namespace ddl
