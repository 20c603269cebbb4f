#include "core/optim/sharded_optimizer.hpp"

#include "core/error.hpp"

namespace ddl {

ShardedOptimizer::ShardedOptimizer(std::unique_ptr<Optimizer> inner, std::size_t begin, std::size_t end)
    : inner_(std::move(inner)), begin_(begin), end_(end) {
  if (end < begin) throw Error("sharded optimizer: its shard ends before it begins");
}

std::string ShardedOptimizer::describe() const {
  return inner_->describe() + ", its state sharded (this replica's: parameters " + std::to_string(begin_) + "-" +
         std::to_string(end_) + ")";
}

void ShardedOptimizer::step(std::span<float> params, std::span<const float> grads, float lr) {
  if (end_ > params.size() || params.size() != grads.size())
    throw Error("sharded optimizer: its shard ends at " + std::to_string(end_) + ", past the " +
                std::to_string(params.size()) + " parameters");
  inner_->step(params.subspan(begin_, end_ - begin_), grads.subspan(begin_, end_ - begin_), lr);
}

std::vector<StateView> ShardedOptimizer::state() {
  std::vector<StateView> views = inner_->state();
  for (StateView& v : views)
    if (v.words.empty()) v.param_offset = begin_;
  return views;
}

}  // namespace ddl
