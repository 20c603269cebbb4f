// The replica group of a data-parallel run over MPI: gradients are averaged with the chosen all-reduce,
// in buckets overlapped with backward (bucket_bytes > 0) or in one piece after it (bucket_bytes = 0).
#pragma once

#include <chrono>
#include <optional>

#include "comm/allreduce.hpp"
#include "comm/gradient_reducer.hpp"

#include "comm/communicator.hpp"
#include "core/train/replica_group.hpp"

namespace ddl {

class MpiReplicaGroup : public ReplicaGroup {
 public:
  MpiReplicaGroup(const Communicator& comm, const AllreduceOptions& allreduce, std::size_t bucket_bytes);

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void broadcast(std::span<float> values, int root) override { comm_.broadcast(values, root); }
  void gradients_ready(std::span<float> gradients, std::size_t offset, std::size_t count) override;
  void average(std::span<float> gradients) override;
  // The ring's halves whatever --allreduce says: this replica's shard is ring_shard(count, size(), rank()).
  void reduce_scatter(std::span<float> gradients) override;
  void all_gather(std::span<float> values) override;
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
  CommStats stats_;
};

}  // namespace ddl
