// ZeRO's first stage (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", 2020): each of D data-parallel replicas keeps the optimizer's state for its shard of the
// parameters only, 1/D of them. The trainer averages only the replica's shard of the gradients (the first
// half of a ring all-reduce, a reduce-scatter), this optimizer updates that shard of the parameters, and the
// shards are then copied to every replica (the ring's second half, an all-gather): the all-reduce's bytes
// and its sums, so that the parameters are those of an unsharded run bit for bit.
#pragma once

#include <memory>

#include "core/optim/optimizer.hpp"

namespace ddl {

class ShardedOptimizer : public Optimizer {
 public:
  // inner: an optimizer made for shard.size() parameters, which it updates as that shard of the buffer.
  ShardedOptimizer(std::unique_ptr<Optimizer> inner, IndexRange shard);

  std::string describe() const override;
  void step(std::span<float> params, std::span<const float> grads, float lr) override;
  std::vector<StateView> state() override;
  std::optional<IndexRange> shard() const override { return shard_; }

 private:
  std::unique_ptr<Optimizer> inner_;
  IndexRange shard_;
};

}  // namespace ddl
