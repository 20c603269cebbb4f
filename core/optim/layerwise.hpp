// What the layer-wise adaptive optimizers (LARS, LAMB) share: the flat buffers cut into the model's
// parameter arrays, each in pieces of at most kPieceSize values, so that a step spreads over the threads, and
// the squared norms of each array summed from its pieces in order: the same bits on every thread count, as
// replicas must agree.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "core/index_range.hpp"

namespace ddl {

// One parameter array's range in the flat buffers, and whether the layer-wise trust ratio and weight decay
// apply to it: not to biases and normalisation scales and shifts, the usual exclusion (a 1-D array).
struct ParamSegment {
  std::size_t offset, count;
  bool adapt;
};

// Where the optimizer updates one replica's shard of the buffers (ZeRO's stages): the shard, and how the sums
// of squares of every array's pieces on the replicas are added up (over the replicas, in place; the same
// figures on each). An array's trust ratio is then its whole norm's, whichever replicas hold its pieces.
// Without sum_over_replicas, no shard: the whole buffers.
struct LayerwiseShard {
  IndexRange range;
  std::function<void(std::span<double>)> sum_over_replicas;
};

class SegmentPieces {
 public:
  static constexpr std::size_t kPieceSize = 1 << 14;
  // Throws InputError unless the segments lie in [0, size) without overlapping, in order. With a shard, the
  // segments are cut to it and counted from its start: the optimizer's buffers are the shard's.
  SegmentPieces(std::vector<ParamSegment> segments, std::size_t size, LayerwiseShard shard = {});

  struct Piece {
    std::size_t segment, begin, end;
  };
  const std::vector<ParamSegment>& segments() const { return segments_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  std::size_t buffer_size() const { return buffer_size_; }  // of the buffers the optimizer updates: the shard's

  // Each segment's sum of a[i]^2 and of b[i]^2 (in double), where sum_piece(piece, a, b) gives a piece's.
  struct Norms {
    std::vector<double> a, b;
  };
  template <typename PieceSums>
  Norms squared_norms(PieceSums sum_piece) const {
    std::vector<double> a(pieces_.size()), b(pieces_.size());
#pragma omp parallel for schedule(static)
    for (std::size_t p = 0; p < pieces_.size(); ++p) sum_piece(pieces_[p], a[p], b[p]);
    Norms out{std::vector<double>(segments_.size()), std::vector<double>(segments_.size())};
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      out.a[pieces_[p].segment] += a[p];
      out.b[pieces_[p].segment] += b[p];
    }
    if (shard_.sum_over_replicas) add_other_shards(out);
    return out;
  }

 private:
  void add_other_shards(Norms& norms) const;

  std::vector<ParamSegment> segments_;
  std::vector<Piece> pieces_;
  std::size_t buffer_size_;
  LayerwiseShard shard_;
  std::vector<std::size_t> whole_index_;  // each segment's among the model's arrays
  std::size_t whole_count_;
};

// sum of x[i]^2 over [begin, end), in double, in a fixed order (eight running sums, then added in turn).
double sum_of_squares(const float* x, std::size_t begin, std::size_t end);

}  // namespace ddl
