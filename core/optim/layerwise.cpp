#include "core/optim/layerwise.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "core/vector_clones.hpp"

namespace ddl {

SegmentPieces::SegmentPieces(std::vector<ParamSegment> segments, std::size_t size) : segments_(std::move(segments)) {
  std::size_t end = 0;
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    const ParamSegment& seg = segments_[s];
    if (seg.offset < end || seg.count > size || seg.offset > size - seg.count)
      throw InputError("layer-wise optimizer: parameter array " + std::to_string(s) + " at " +
                       std::to_string(seg.offset) + " (" + std::to_string(seg.count) +
                       " values) overlaps another or lies outside the " + std::to_string(size) + " parameters");
    for (std::size_t b = seg.offset; b < seg.offset + seg.count; b += kPieceSize)
      pieces_.push_back({s, b, std::min(seg.offset + seg.count, b + kPieceSize)});
    end = seg.offset + seg.count;
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
