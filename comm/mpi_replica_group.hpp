// The replica group of a data-parallel run over MPI: gradients are averaged with the chosen all-reduce,
// in buckets overlapped with backward (bucket_bytes > 0) or in one piece after it (bucket_bytes = 0). With
// sharded gradients (ZeRO's stage 2) the buckets are reduced to the ranks that own them instead; with sharded
// parameters (stage 3) the layers' parameter gathers go through the same queue.
#pragma once

#include <chrono>
#include <optional>

#include "comm/allreduce.hpp"
#include "comm/gradient_reducer.hpp"

#include "comm/communicator.hpp"
#include "core/train/replica_group.hpp"

namespace ddl {

// How gradients are reduced during backward.
struct GradientBuckets {
  std::size_t bytes = 0;            // 0: in one piece after backward
  bool to_owners = false;           // sharded gradients (ZeRO's stage 2); needs bytes > 0
  bool on_backward_thread = false;  // the layout's own messages (a pipeline's) call MPI during backward
  bool shard_parameters = false;    // ZeRO's stage 3; needs to_owners
};

class MpiReplicaGroup : public ReplicaGroup {
 public:
  MpiReplicaGroup(const Communicator& comm, const AllreduceOptions& allreduce, const GradientBuckets& buckets);

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void broadcast(std::span<float> values, int root) override { comm_.broadcast(values, root); }
  void gradients_ready(std::span<float> gradients, std::size_t offset, std::size_t count) override;
  void average(std::span<float> gradients) override;
  // The ring's halves whatever --allreduce says: this replica's shard is ring_shard(count, size(), rank()).
  // With sharded gradients, reduce_scatter waits for the buckets reduced during backward.
  void reduce_scatter(std::span<float> gradients) override;
  void all_gather(std::span<float> values) override;
  std::optional<IndexRange> parameter_shard(std::size_t count) const override;
  std::uint64_t fetch_parameters(std::span<float> params, std::size_t offset, std::size_t count) override;
  void await_parameters(std::uint64_t ticket) override;
  CommStats take_stats() override;
  void sum(std::span<double> values) override { comm_.allreduce_sum(values); }
  void check_same(const std::string& what, std::uint64_t fingerprint) override;

 private:
  // Runs a collective, adding its time to the stats' wait.
  template <typename Collective>
  void timed(Collective collective) {
    const auto t0 = std::chrono::steady_clock::now();
    collective();
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  const Communicator& comm_;
  Allreducer allreducer_;
  std::optional<GradientReducer> overlapped_;  // when bucketing
  bool shard_gradients_;  // buckets reduced to their owners
  bool shard_parameters_;
  CommStats stats_;
};

}  // namespace ddl
