// The tensor group of a split layer over MPI: all-gathers and reduce-scatters with MPI's collectives
// (the pieces are activations of one batch, often small, where MPI's latency-tuned algorithms do well),
// all-reduces with the project's ring when large.
#pragma once

#include "comm/allreduce.hpp"
#include "comm/communicator.hpp"
#include "core/tensor_group.hpp"

namespace ddl {

class MpiTensorGroup : public TensorGroup {
 public:
  // Collective over `comm`, which must outlive the group.
  explicit MpiTensorGroup(const Communicator& comm);

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_gather(std::span<const float> mine, std::span<float> all) override;
  void all_gather(std::span<const std::int32_t> mine, std::span<std::int32_t> all) override;
  void reduce_scatter_sum(std::span<const float> all, std::span<float> mine) override;
  void all_reduce_sum(std::span<float> values) override;
  double take_bytes_sent() override;

 private:
  const Communicator& comm_;
  Allreducer ring_;
  double bytes_sent_ = 0;
};

}  // namespace ddl
