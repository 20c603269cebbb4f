// What a layer split across ranks needs from the other ranks of its tensor group, without knowing how
// they are reached: core/ stays free of MPI, and comm/ provides the implementation over MPI. Every rank of
// the group makes the same calls in the same order.
#pragma once

#include <cstdint>
#include <span>

namespace ddl {

class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // `all` receives size() pieces of mine.size() values, in rank order.
  virtual void all_gather(std::span<const float> mine, std::span<float> all) = 0;
  virtual void all_gather(std::span<const std::int32_t> mine, std::span<std::int32_t> all) = 0;
  // Sums `all` (size() pieces) over the group; this rank receives the sum of its own piece.
  virtual void reduce_scatter_sum(std::span<const float> all, std::span<float> mine) = 0;
  // In place.
  virtual void all_reduce_sum(std::span<float> values) = 0;
  // Bytes this rank sent since the last call, counted as ring algorithms send them: (size - 1) pieces for
  // an all-gather or a reduce-scatter, 2 (size - 1) / size of the buffer for an all-reduce.
  virtual double take_bytes_sent() = 0;
};

}  // namespace ddl
