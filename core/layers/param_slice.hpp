// The part of a parameter that a rank of a tensor group holds (ParamSpec's whole_dims, row_begin,
// row_groups, col_begin), seen from the whole array: what checkpoints write and read, and what
// initialisers cut, so that a split model's values are the whole model's, wherever they live.
#pragma once

#include <span>
#include <vector>

#include "core/layers/layer.hpp"

namespace ddl {

// Values in the whole array of a parameter that this rank may hold only a part of.
inline std::size_t whole_size(const ParamSpec& spec) {
  return product(spec.whole_dims.empty() ? spec.dims : spec.whole_dims);
}

// Where this rank's values of a parameter lie in its whole array: `blocks` runs of `count` values, one
// after another here (from `offset`), `stride` values apart there (from `whole_offset`).
struct SliceRun {
  std::size_t offset, whole_offset, count, blocks, stride;
};
std::vector<SliceRun> slice_runs(const ParamSpec& spec);

// Copies this rank's part of a parameter out of its whole array (whole_size(spec) values).
void take_slice(std::span<const float> whole, const ParamSpec& spec, std::span<float> mine);

}  // namespace ddl
