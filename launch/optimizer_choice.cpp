#include "launch/optimizer_choice.hpp"

#include "core/error.hpp"
#include "core/optim/sharded_optimizer.hpp"

namespace ddl {
namespace {

// For the whole buffers, or for shard.range alone (a ShardedOptimizer's inner optimizer).
std::unique_ptr<Optimizer> optimizer_for(const TrainOptions& o, const Model& model, LayerwiseShard shard) {
  const std::size_t params = model.param_count();
  if (!o.layerwise_optimizer()) {
    const std::size_t updated = shard.sum_over_replicas ? shard.range.size() : params;
    if (o.optimizer == OptimizerKind::adam)
      return make_adam(updated, {o.adam_beta1, o.adam_beta2, o.adam_epsilon, o.weight_decay});
    return make_sgd(updated, {o.momentum, o.nesterov, o.weight_decay});
  }
  std::vector<ParamSegment> segments;
  for (const auto& e : model.param_entries()) {
    if (!e.spec.whole_dims.empty())
      throw InputError(std::string("--optimizer ") + option_word(o.optimizer) + " needs whole layers on each rank; " +
                       e.name + " is split");
    segments.push_back({e.offset, e.size, e.spec.dims.size() > 1});
  }
  if (o.optimizer == OptimizerKind::lars)
    return make_lars(std::move(segments), params, {o.momentum, o.weight_decay, o.lars_trust}, std::move(shard));
  return make_lamb(std::move(segments), params, {o.adam_beta1, o.adam_beta2, o.adam_epsilon, o.weight_decay},
                   std::move(shard));
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o, const Model& model, LayerwiseShard shard) {
  if (!shard.sum_over_replicas) return optimizer_for(o, model, {});
  const IndexRange range = shard.range;
  return std::make_unique<ShardedOptimizer>(optimizer_for(o, model, std::move(shard)), range);
}

}  // namespace ddl
