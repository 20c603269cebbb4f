// All-reduce of float buffers across a communicator, three ways:
//  - ring: the project's own reduce-scatter then all-gather around a ring of ranks (Patarasuk & Yuan);
//    each step's segment is cut into chunks sent and received with non-blocking calls, and every chunk is
//    reduced as soon as it arrives, so large buffers stream. Optionally the wire carries bf16 while the
//    sums stay f32 (half the bytes; error bounded in bf16_wire_error_bound below).
//  - hierarchical: ranks of one node reduce through MPI-3 shared memory (each rank sums its slice straight
//    from its neighbours' buffers), one leader per node runs the ring across nodes, and the result is
//    shared back through the same memory.
//  - mpi: MPI_Allreduce, for comparison and as a fallback.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/index_range.hpp"

namespace ddl {

enum class AllreduceAlgorithm { ring, hierarchical, mpi };
enum class ReduceOp { sum, average };
enum class WireType { f32, bf16 };

std::string to_string(AllreduceAlgorithm algorithm);

struct AllreduceOptions {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::ring;
  WireType wire = WireType::f32;
  std::size_t chunk_bytes = 256 * 1024;  // pipelining grain of the ring
};

// Relative error bound of a bf16-wire sum over `ranks` ranks: every partial sum is rounded to bf16
// (8 significant bits: unit round-off 2^-8 with round-to-nearest) once per hop, ranks - 1 hops in the
// reduce-scatter and one for the all-gather; the error is relative to sum |x_i|.
inline double bf16_wire_error_bound(int ranks) { return ranks * std::ldexp(1.0, -8) * 1.01; }

// Where rank `rank` of `ranks` keeps its shard of a buffer of `count` values after the ring's reduce-scatter:
// [begin, end), the same segment the ring's all-gather sends on from it.
IndexRange ring_shard(std::size_t count, int ranks, int rank);

class Allreducer {
 public:
  // The communicator must outlive the reducer. Collective: every rank of `comm` constructs one.
  Allreducer(const Communicator& comm, const AllreduceOptions& options);
  ~Allreducer();
  Allreducer(const Allreducer&) = delete;
  Allreducer& operator=(const Allreducer&) = delete;

  // In place; every rank passes the same count. Collective.
  void run(std::span<float> data, ReduceOp op);
  // The ring's two halves, whatever the algorithm, for sharded optimizer state: after reduce_scatter, this
  // rank's ring_shard of `data` holds the sum (or mean) over the ranks, the bits the ring's run() gives there
  // (with an f32 wire); all_gather then copies every rank's shard to every rank, in f32 whatever the wire (it
  // carries parameters). Together they send what run() sends.
  void reduce_scatter(std::span<float> data, ReduceOp op);
  void all_gather(std::span<float> data);
  // ZeRO's stage 2, one bucket of the gradients at a time: reduces data[offset, offset + count) so that each
  // value's sum (or mean) lands only on the rank whose ring_shard(data.size()) holds it, the bits
  // reduce_scatter() leaves there (f32 wire). Each owner's piece goes round the ring from the rank after it to
  // the owner, each rank adding its own values, as the ring's segment does; chunks are forwarded as they
  // arrive. Every rank sends every piece but its own once: over the whole buffer, what reduce_scatter sends.
  // The range's other values are left undefined.
  void reduce_to_owners(std::span<float> data, std::size_t offset, std::size_t count, ReduceOp op);
  // ZeRO's stage 3, its mirror: copies data[offset, offset + count) from the ranks whose ring_shard(data.size())
  // holds each value to every other rank, in f32. Each owner's piece goes round the ring from the owner, each
  // rank keeping the chunks and passing them on as they arrive. Over the whole buffer, what all_gather sends.
  void gather_from_owners(std::span<float> data, std::size_t offset, std::size_t count);
  const AllreduceOptions& options() const { return options_; }
  const Communicator& communicator() const { return comm_; }

 private:
  class SharedNode;
  enum class RingPhases { reduce_scatter, all_gather, both };
  void ring(const Communicator& comm, std::span<float> data, RingPhases phases, WireType wire);
  void hierarchical(std::span<float> data);
  void chain(std::span<float> piece, int start, bool add, const std::string& what);

  const Communicator& comm_;
  AllreduceOptions options_;
  std::vector<std::uint16_t> send_wire_, recv_wire_;
  std::vector<float> recv_f32_;
  std::unique_ptr<SharedNode> node_;  // hierarchical only
};

}  // namespace ddl
