#include "comm/mpi_replica_group.hpp"

#include <chrono>
#include <utility>

#include "core/error.hpp"

namespace ddl {

MpiReplicaGroup::MpiReplicaGroup(const Communicator& comm, const AllreduceOptions& allreduce,
                                 const GradientBuckets& buckets)
    : comm_(comm),
      allreducer_(comm, allreduce),
      shard_gradients_(buckets.to_owners),
      shard_parameters_(buckets.shard_parameters && comm.size() > 1) {
  if (buckets.to_owners && buckets.bytes == 0) throw Error("sharded gradients are reduced in buckets: no bucket size given");
  if (buckets.shard_parameters && !buckets.to_owners) throw Error("sharded parameters need sharded gradients");
  if (buckets.bytes > 0 && comm.size() > 1)
    overlapped_.emplace(allreducer_, buckets.bytes,
                        buckets.to_owners ? GradientReducer::Reduction::to_owners : GradientReducer::Reduction::all_reduce,
                        !buckets.on_backward_thread);
}

void MpiReplicaGroup::gradients_ready(std::span<float> gradients, std::size_t offset, std::size_t count) {
  if (overlapped_) overlapped_->ready(gradients, offset, count);
}

void MpiReplicaGroup::average(std::span<float> gradients) {
  if (comm_.size() == 1) return;
  if (shard_gradients_) throw Error("sharded gradients cannot be averaged whole");
  const auto wait = comm_.waiting("the gradient all-reduce");
  stats_.bytes += static_cast<double>(gradients.size_bytes());
  if (overlapped_) {
    stats_.wait_seconds += overlapped_->finish(gradients);
    return;
  }
  timed([&] { allreducer_.run(gradients, ReduceOp::average); });
}

void MpiReplicaGroup::reduce_scatter(std::span<float> gradients) {
  if (comm_.size() == 1) return;
  const auto wait = comm_.waiting("the gradient reduce-scatter");
  stats_.bytes += static_cast<double>(gradients.size_bytes()) / 2;  // half an all-reduce
  if (shard_gradients_)
    stats_.wait_seconds += overlapped_->finish(gradients);
  else
    timed([&] { allreducer_.reduce_scatter(gradients, ReduceOp::average); });
}

void MpiReplicaGroup::all_gather(std::span<float> values) {
  if (comm_.size() == 1) return;
  const auto wait = comm_.waiting("the parameter all-gather");
  stats_.bytes += static_cast<double>(values.size_bytes()) / 2;
  timed([&] { allreducer_.all_gather(values); });
}

std::optional<IndexRange> MpiReplicaGroup::parameter_shard(std::size_t count) const {
  if (!shard_parameters_) return std::nullopt;
  return ring_shard(count, comm_.size(), comm_.rank());
}

std::uint64_t MpiReplicaGroup::fetch_parameters(std::span<float> params, std::size_t offset, std::size_t count) {
  if (!shard_parameters_) throw Error("parameters fetched from a replica group that keeps them whole");
  stats_.bytes += static_cast<double>(count * sizeof(float)) / 2;  // half an all-reduce of the range
  return overlapped_->gather(params, offset, count);
}

void MpiReplicaGroup::await_parameters(std::uint64_t ticket) {
  const auto wait = comm_.waiting("a layer's parameter gather");
  timed([&] { overlapped_->await_gather(ticket); });
}

ReplicaGroup::CommStats MpiReplicaGroup::take_stats() { return std::exchange(stats_, {}); }

void MpiReplicaGroup::check_same(const std::string& what, std::uint64_t fingerprint) {
  comm_.check_same(what, fingerprint);
}

}  // namespace ddl
