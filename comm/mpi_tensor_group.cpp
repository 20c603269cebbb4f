#include "comm/mpi_tensor_group.hpp"

#include <climits>
#include <utility>

#include "comm/mpi_error.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

// Below this, MPI_Allreduce's latency-bound algorithms beat a ring of pipelined chunks.
constexpr std::size_t kRingBytes = 1 << 20;

int count_of(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX)) throw Error(std::string(what) + ": a piece of " + std::to_string(n) + " values");
  return static_cast<int>(n);
}

void check_pieces(std::size_t mine, std::size_t all, int ranks, const char* what) {
  if (all != mine * static_cast<std::size_t>(ranks))
    throw Error(std::string(what) + ": " + std::to_string(all) + " values are not " + std::to_string(ranks) +
                " pieces of " + std::to_string(mine));
}

}  // namespace

MpiTensorGroup::MpiTensorGroup(const Communicator& comm)
    : comm_(comm), ring_(comm, {AllreduceAlgorithm::ring, WireType::f32}) {}

void MpiTensorGroup::all_gather(std::span<const float> mine, std::span<float> all) {
  check_pieces(mine.size(), all.size(), size(), "all-gather");
  const auto wait = comm_.waiting("an all-gather of a split layer's activations");
  const int n = count_of(mine.size(), "all-gather");
  check_mpi(MPI_Allgather(mine.data(), n, MPI_FLOAT, all.data(), n, MPI_FLOAT, comm_.get()), "MPI_Allgather");
  bytes_sent_ += static_cast<double>(size() - 1) * static_cast<double>(mine.size_bytes());
}

void MpiTensorGroup::all_gather(std::span<const std::int32_t> mine, std::span<std::int32_t> all) {
  check_pieces(mine.size(), all.size(), size(), "all-gather");
  const auto wait = comm_.waiting("an all-gather of the group's labels");
  const int n = count_of(mine.size(), "all-gather");
  check_mpi(MPI_Allgather(mine.data(), n, MPI_INT32_T, all.data(), n, MPI_INT32_T, comm_.get()), "MPI_Allgather");
  bytes_sent_ += static_cast<double>(size() - 1) * static_cast<double>(mine.size_bytes());
}

void MpiTensorGroup::reduce_scatter_sum(std::span<const float> all, std::span<float> mine) {
  check_pieces(mine.size(), all.size(), size(), "reduce-scatter");
  const auto wait = comm_.waiting("a reduce-scatter of a split layer's input gradients");
  const int n = count_of(mine.size(), "reduce-scatter");
  check_mpi(MPI_Reduce_scatter_block(all.data(), mine.data(), n, MPI_FLOAT, MPI_SUM, comm_.get()),
            "MPI_Reduce_scatter_block");
  bytes_sent_ += static_cast<double>(size() - 1) * static_cast<double>(mine.size_bytes());
}

void MpiTensorGroup::all_reduce_sum(std::span<float> values) {
  if (size() == 1) return;
  if (values.size_bytes() >= kRingBytes) {
    const auto wait = comm_.waiting("an all-reduce within the tensor group");
    ring_.run(values, ReduceOp::sum);
  } else {
    comm_.allreduce_sum(values);
  }
  bytes_sent_ += 2.0 * (size() - 1) / size() * static_cast<double>(values.size_bytes());
}

double MpiTensorGroup::take_bytes_sent() { return std::exchange(bytes_sent_, 0.0); }

}  // namespace ddl
