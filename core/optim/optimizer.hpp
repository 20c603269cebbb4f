// Optimizers update the model's flat parameter buffer from its flat gradient buffer in one pass. Their
// state (momentum, Adam's moments and step count) is exposed by name for checkpoints: each float array holds
// a value per parameter (from its param_offset), each word array is the same on every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/index_range.hpp"
#include "core/layers/layer.hpp"
#include "core/optim/layerwise.hpp"

namespace ddl {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string describe() const = 0;
  // One update with learning rate lr. params and grads have the size given at construction.
  virtual void step(std::span<float> params, std::span<const float> grads, float lr) = 0;
  virtual std::vector<StateView> state() = 0;
  // The parameters [begin, end) it updates where that is only this replica's shard of them (ShardedOptimizer):
  // the trainer then reduce-scatters the gradients and all-gathers the parameters instead of averaging the
  // gradients.
  virtual std::optional<IndexRange> shard() const { return std::nullopt; }
  bool sharded() const { return shard().has_value(); }
};

struct SgdOptions {
  float momentum = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;
};

struct AdamOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;  // Keras's default; PyTorch uses 1e-8
  float weight_decay = 0.0f;
};

struct LarsOptions {
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  float eta = 0.001f;  // the trust coefficient (the paper's eta)
};

std::unique_ptr<Optimizer> make_sgd(std::size_t size, const SgdOptions& options);
std::unique_ptr<Optimizer> make_adam(std::size_t size, const AdamOptions& options);
// The layer-wise adaptive ones need to know where each parameter array lies (Model::param_segments); with a
// shard, they are given and update only its part of the buffers (a ShardedOptimizer's inner optimizer).
std::unique_ptr<Optimizer> make_lars(std::vector<ParamSegment> segments, std::size_t size, const LarsOptions& options,
                                     LayerwiseShard shard = {});
std::unique_ptr<Optimizer> make_lamb(std::vector<ParamSegment> segments, std::size_t size, const AdamOptions& options,
                                     LayerwiseShard shard = {});

}  // namespace ddl
