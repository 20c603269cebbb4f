#include "comm/mpi_replica_group.hpp"

#include <chrono>
#include <utility>

#include "core/error.hpp"

namespace ddl {

MpiReplicaGroup::MpiReplicaGroup(const Communicator& comm, const AllreduceOptions& allreduce, std::size_t bucket_bytes)
    : comm_(comm), allreducer_(comm, allreduce) {
  if (bucket_bytes > 0 && comm.size() > 1) overlapped_.emplace(allreducer_, bucket_bytes);
}

void MpiReplicaGroup::gradients_ready(std::span<float> gradients, std::size_t offset, std::size_t count) {
  if (overlapped_) overlapped_->ready(gradients, offset, count);
}

void MpiReplicaGroup::average(std::span<float> gradients) {
  if (comm_.size() == 1) return;
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
  timed([&] { allreducer_.reduce_scatter(gradients, ReduceOp::average); });
}

void MpiReplicaGroup::all_gather(std::span<float> values) {
  if (comm_.size() == 1) return;
  const auto wait = comm_.waiting("the parameter all-gather");
  stats_.bytes += static_cast<double>(values.size_bytes()) / 2;
  timed([&] { allreducer_.all_gather(values); });
}

ReplicaGroup::CommStats MpiReplicaGroup::take_stats() { return std::exchange(stats_, {}); }

void MpiReplicaGroup::check_same(const std::string& what, std::uint64_t fingerprint) {
  comm_.check_same(what, fingerprint);
}

}  // namespace ddl
