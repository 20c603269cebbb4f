#include "core/recompute_segments.hpp"

namespace ddl {

std::vector<std::size_t> recompute_segments(const std::vector<double>& output_bytes) {
  const std::size_t n = output_bytes.size();
  std::size_t segments = 1;
  while (segments * segments < n) ++segments;
  double total = 0;
  for (double b : output_bytes) total += b;
  std::vector<std::size_t> segment_of(n, 0);
  std::size_t segment = 0;
  double bytes = 0;
  for (std::size_t i = 0; i < n; ++i) {
    segment_of[i] = segment;
    bytes += output_bytes[i];
    if (bytes * segments >= total * (segment + 1) && segment + 1 < segments && i + 1 < n) ++segment;
  }
  return segment_of;
}

}  // namespace ddl
