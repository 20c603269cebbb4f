// What training needs from the other replicas of a data-parallel run, without knowing how they are
// reached: core/ stays free of MPI, and comm/ provides the implementation over MPI. A single process is
// a group of one, where every operation is the identity.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/index_range.hpp"

namespace ddl {

class ReplicaGroup {
 public:
  virtual ~ReplicaGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Makes every replica's values equal to the root's.
  virtual void broadcast(std::span<float> values, int root) = 0;
  // During backward: gradients[offset, offset + count) are final for this step (the model reports layers
  // last first), so an implementation may start averaging them while backward goes on.
  virtual void gradients_ready(std::span<float> /*gradients*/, std::size_t /*offset*/, std::size_t /*count*/) {}
  // After backward: replaces each replica's gradients by their mean over the group.
  virtual void average(std::span<float> gradients) = 0;
  // For an optimizer whose state is sharded across the group (ShardedOptimizer): the mean only in this
  // replica's shard of the gradients, the rest left undefined; then, after the update, every replica's shard of
  // the parameters copied to all. Together they cost what average() does.
  virtual void reduce_scatter(std::span<float> gradients) { average(gradients); }
  virtual void all_gather(std::span<float> /*values*/) {}
  // ZeRO's stage 3, where the group shards the parameters as well: [begin, end) of `count` parameters is the
  // only part this replica keeps between uses (its optimizer's shard); none where it keeps them whole.
  virtual std::optional<IndexRange> parameter_shard(std::size_t /*count*/) const { return std::nullopt; }
  // Starts copying params[offset, offset + count) from the replicas that own them, behind the gradient buckets
  // and gathers asked for before (in the background where the group can); await_parameters(ticket) waits for
  // it. Every replica asks for the same ranges in the same order.
  virtual std::uint64_t fetch_parameters(std::span<float> /*params*/, std::size_t /*offset*/, std::size_t /*count*/) {
    return 0;
  }
  virtual void await_parameters(std::uint64_t /*ticket*/) {}
  // Seconds spent waiting for gradient communication, and bytes all-reduced, since the last call.
  struct CommStats {
    double wait_seconds = 0;
    double bytes = 0;
  };
  virtual CommStats take_stats() { return {}; }
  // Sums metric counters over the group (loss sums, hit counts, image counts).
  virtual void sum(std::span<double> values) = 0;
  // Throws, naming the replicas that differ, unless every replica passes the same fingerprint.
  virtual void check_same(const std::string& what, std::uint64_t fingerprint) = 0;
};

class SingleProcess : public ReplicaGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void broadcast(std::span<float>, int) override {}
  void average(std::span<float>) override {}
  void sum(std::span<double>) override {}
  void check_same(const std::string&, std::uint64_t) override {}
};

}  // namespace ddl
