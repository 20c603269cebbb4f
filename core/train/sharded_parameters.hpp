// ZeRO's stage 3 (Rajbhandari et al., 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", section 5.3): between uses a replica keeps only its shard of the parameters, the one its optimizer
// updates. Each layer's parameters are gathered from their owners just before the layer runs, in forward, in a
// recomputed forward and in backward, and given back after it (whole 2 MB blocks, as the gradients' are). The
// model says which layer runs next, so that its gather is asked for while this one computes; the last layer's
// forward keeps its parameters for its backward, which follows at once.
//
// Whatever reads the parameters outside a step (evaluation, checkpoints, a re-plan's move, the end of
// training) asks for them whole first (make_whole: one all-gather); the next step gives back the rest again.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/model.hpp"
#include "core/train/replica_group.hpp"

namespace ddl {

class ShardedParameters {
 public:
  // prefetch: whether to ask for the next layer's parameters ahead; only where the group gathers in the
  // background, and the model's order of layers is the step's (not a pipeline's interleaved micro-batches).
  ShardedParameters(ReplicaGroup& replicas, std::span<float> params, IndexRange shard, bool prefetch);
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  // The model's hooks (Model::before_layer, after_layer).
  void before_layer(ParamRange now, ParamRange next);
  void after_layer(ParamRange now);
  // At a step's start: parameters made whole since the last step go back to the shard.
  void begin_step();
  void make_whole();
  bool whole() const { return whole_; }

 private:
  struct Fetch {
    ParamRange range;
    std::uint64_t ticket;
  };
  void give_back(ParamRange range);
  void drop_ahead();  // waits for the layer gathered ahead, and gives it back

  ReplicaGroup& replicas_;
  std::span<float> params_;
  IndexRange shard_;
  bool prefetch_;
  bool whole_ = true;  // as initialised, broadcast or loaded
  std::optional<Fetch> ahead_;        // asked for before its layer runs
  std::optional<ParamRange> kept_;    // gathered, and the next layer to run
  bool keep_current_ = false;         // the layer running now runs next as well
};

}  // namespace ddl
