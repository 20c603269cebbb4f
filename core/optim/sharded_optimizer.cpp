#include "core/optim/sharded_optimizer.hpp"

#include "core/error.hpp"

namespace ddl {

ShardedOptimizer::ShardedOptimizer(std::unique_ptr<Optimizer> inner, IndexRange shard)
    : inner_(std::move(inner)), shard_(shard) {
  if (shard.end < shard.begin) throw Error("sharded optimizer: its shard ends before it begins");
}

std::string ShardedOptimizer::describe() const {
  return inner_->describe() + ", its state sharded (this replica's: parameters " + std::to_string(shard_.begin) + "-" +
         std::to_string(shard_.end) + ")";
}

void ShardedOptimizer::step(std::span<float> params, std::span<const float> grads, float lr) {
  if (shard_.end > params.size() || params.size() != grads.size())
    throw Error("sharded optimizer: its shard ends at " + std::to_string(shard_.end) + ", past the " +
                std::to_string(params.size()) + " parameters");
  inner_->step(params.subspan(shard_.begin, shard_.size()), grads.subspan(shard_.begin, shard_.size()), lr);
}

std::vector<StateView> ShardedOptimizer::state() {
  std::vector<StateView> views = inner_->state();
  for (StateView& v : views)
    if (v.words.empty()) v.param_offset = shard_.begin;
  return views;
}

}  // namespace ddl
