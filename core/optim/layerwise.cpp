#include "core/optim/layerwise.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "core/vector_clones.hpp"

namespace ddl {

SegmentPieces::SegmentPieces(std::vector<ParamSegment> segments, std::size_t size, LayerwiseShard shard)
    : shard_(std::move(shard)), whole_count_(segments.size()) {
  if (!shard_.sum_over_replicas) shard_.range = {0, size};
  const IndexRange r = shard_.range;
  if (r.end < r.begin || r.end > size)
    throw InputError("layer-wise optimizer: shard " + std::to_string(r.begin) + "-" + std::to_string(r.end) +
                     " lies outside the " + std::to_string(size) + " parameters");
  buffer_size_ = r.size();
  std::size_t end = 0;
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const ParamSegment& seg = segments[s];
    if (seg.offset < end || seg.count > size || seg.offset > size - seg.count)
      throw InputError("layer-wise optimizer: parameter array " + std::to_string(s) + " at " +
                       std::to_string(seg.offset) + " (" + std::to_string(seg.count) +
                       " values) overlaps another or lies outside the " + std::to_string(size) + " parameters");
    end = seg.offset + seg.count;
    // Its part in the shard, counted from the shard's start.
    const std::size_t first = std::max(seg.offset, r.begin), last = std::min(end, r.end);
    if (first >= last) continue;
    const std::size_t local = segments_.size();
    segments_.push_back({first - r.begin, last - first, seg.adapt});
    whole_index_.push_back(s);
    for (std::size_t b = first - r.begin; b < last - r.begin; b += kPieceSize)
      pieces_.push_back({local, b, std::min(last - r.begin, b + kPieceSize)});
  }
}

void SegmentPieces::add_other_shards(Norms& norms) const {
  // Every array's two sums on every replica, zeros where this one holds none of it.
  std::vector<double> sums(2 * whole_count_, 0.0);
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    sums[2 * whole_index_[s]] = norms.a[s];
    sums[2 * whole_index_[s] + 1] = norms.b[s];
  }
  shard_.sum_over_replicas(sums);
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    norms.a[s] = sums[2 * whole_index_[s]];
    norms.b[s] = sums[2 * whole_index_[s] + 1];
  }
}

DDL_VECTOR_CLONES double sum_of_squares(const float* x, std::size_t begin, std::size_t end) {
  double lane[8] = {};
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8)
    for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(x[i + l]) * x[i + l];
  for (int l = 0; i < end; ++i, ++l) lane[l] += static_cast<double>(x[i]) * x[i];
  double sum = 0;
  for (double v : lane) sum += v;
  return sum;
}

}  // namespace ddl
