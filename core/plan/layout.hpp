// A training layout as a value: the one thing launch/ builds a run from, whether the user chose it with
// options or the planner chose it. ranks = replicas x stages x tensor (D x S x T). The rules that follow
// from a layout (which ranks bring their own images, where a rank sits in the grid, when gradients may be
// averaged in buckets during backward, which layers may split) are its methods, written here once.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/train/pipeline_schedule.hpp"

namespace ddl {

// How a layer can be split across a tensor group (core/layers/split_dense.hpp, split_linear.hpp).
enum class SplitKind { none, dense, block };

// A rank's place in the grid. World rank = (replica * stages + stage) * tensor + t: the ranks that split a
// stage's layers are neighbours (they exchange activations at every split layer), then a replica's stages,
// on one node when the node has room for them.
struct GridPosition {
  int replica = 0, stage = 0, t = 0;
};

struct Layout {
  int replicas = 1, stages = 1, tensor = 1;
  int micro_batches = 1;
  std::vector<std::size_t> cut;    // layers per stage (one entry per stage; empty: balanced by measurement)
  std::vector<std::size_t> split;  // layers split across each tensor group, ascending (empty when T = 1)
  int batch = 0;                   // per rank that brings its own images (data_ranks), per step
  // Split dense layers gather their group's images (each rank brings its own); split transformer blocks
  // share one batch. Layers of both kinds never split in one layout.
  SplitKind split_kind = SplitKind::none;
  // What the user chose, which the planner keeps: GPipe keeps every micro-batch's activations in flight,
  // 1F1B at most one a stage ahead; bucket_bytes > 0 asks for data parallelism's all-reduce in buckets.
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  double bucket_bytes = 0;
  // ZeRO's stage across each stage's replicas (0: none; 1: the optimizer's state sharded; 2: the gradients
  // too, each bucket reduced during backward to the replicas that own it; 3: the parameters too, each
  // layer's gathered before it runs and given back after).
  int shard_state = 0;
  // Per stage: its activations dropped in forward and computed again in backward
  // (Model::recompute_activations); empty: none.
  std::vector<char> recompute;

  int ranks() const { return replicas * stages * tensor; }
  GridPosition position(int rank) const { return {rank / (stages * tensor), rank / tensor % stages, rank % tensor}; }
  // The ranks that bring their own images each step, and this position's index among them: the training
  // data is dealt among D x T ranks where split dense layers gather a group's images, else among the D
  // replicas.
  int data_ranks() const { return gathers_batch() ? replicas * tensor : replicas; }
  // Split dense layers: the first of them gathers its group's images, each rank having brought its own.
  bool gathers_batch() const { return split_kind == SplitKind::dense && !split.empty(); }
  int data_rank(const GridPosition& p) const {
    return gathers_batch() ? p.replica * tensor + p.t : p.replica;
  }
  int global_batch() const { return batch * data_ranks(); }
  // Buckets overlap backward only on plain data parallelism: a pipeline's messages and a split layer's
  // collectives would call MPI from the bucket thread and the step's at once, which MPI_THREAD_SERIALIZED
  // forbids; such a layout averages its gradients in one piece after the step.
  // Nor with sharded state, whose gradients are reduce-scattered after backward.
  bool buckets_overlap_backward() const { return bucket_bytes > 0 && plain_data_parallel() && shard_state == 0; }
  // Whether each replica keeps only its shard of the optimizer's state, and of the reduced gradients.
  bool shards_optimizer_state() const { return shard_state > 0 && replicas > 1; }
  bool shards_gradients() const { return shard_state >= 2 && replicas > 1; }
  bool shards_parameters() const { return shard_state >= 3 && replicas > 1; }
  // What each replica keeps only its shard of: "optimizer state", "optimizer state and gradients", ...
  std::string sharded_state() const;
  // The gradients' buckets reduced during backward (0: one reduction after it): bucket_bytes where they
  // overlap; sharded gradients always go in buckets, kShardedBucketBytes unless bucket_bytes says.
  static constexpr double kShardedBucketBytes = 25 << 20;
  double reduce_bucket_bytes() const {
    if (shards_gradients()) return bucket_bytes > 0 ? bucket_bytes : kShardedBucketBytes;
    return buckets_overlap_backward() ? bucket_bytes : 0;
  }
  bool plain_data_parallel() const { return stages == 1 && tensor == 1; }
  bool recomputes(int stage) const {
    return static_cast<std::size_t>(stage) < recompute.size() && recompute[static_cast<std::size_t>(stage)];
  }
  bool recomputes_any() const;
  // ", activations recomputed" (on every stage), ", activations recomputed on stages 0,1", or "".
  std::string recompute_note() const;
  // Whether a layer of this kind, whose `divisor` (a dense layer's outputs, a block's heads) the group must
  // divide, may split across this layout's tensor groups.
  bool may_split(SplitKind kind, int divisor) const {
    return kind != SplitKind::none && tensor > 1 && divisor > 0 && divisor % tensor == 0;
  }
  // "2 x 1 x 2, 1 micro-batch, split 10,12,13, batch 32"
  std::string describe() const;
};

}  // namespace ddl
