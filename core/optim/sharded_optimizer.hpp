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
  // inner: an optimizer made for end - begin parameters, which it updates as [begin, end) of the buffer.
  ShardedOptimizer(std::unique_ptr<Optimizer> inner, std::size_t begin, std::size_t end);

  std::string describe() const override;
  void step(std::span<float> params, std::span<const float> grads, float lr) override;
  std::vector<StateView> state() override;
  std::optional<Shard> shard() const override { return Shard{begin_, end_}; }

 private:
  std::unique_ptr<Optimizer> inner_;
  std::size_t begin_, end_;
};

}  // namespace ddl
