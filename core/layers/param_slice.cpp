#include "core/layers/param_slice.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace ddl {

std::vector<SliceRun> slice_runs(const ParamSpec& spec) {
  const std::size_t size = product(spec.dims);
  if (spec.whole_dims.empty()) return {{0, 0, size, 1, 0}};
  if (spec.whole_dims.size() != spec.dims.size() || spec.dims.empty())
    throw Error("parameter " + spec.name + ": its slice and its whole array differ in rank");
  const auto rows = static_cast<std::size_t>(spec.dims[0]), whole_rows = static_cast<std::size_t>(spec.whole_dims[0]);
  const std::size_t row = size / rows;  // values a row holds here
  if (rows == whole_rows) {  // columns of a matrix
    if (spec.dims.size() != 2) throw Error("parameter " + spec.name + ": only matrices split by columns");
    const auto whole_row = static_cast<std::size_t>(spec.whole_dims[1]);
    return {{0, static_cast<std::size_t>(spec.col_begin), row, rows, whole_row}};
  }
  const auto groups = static_cast<std::size_t>(spec.row_groups);
  const std::size_t mine = rows / groups, per_group = whole_rows / groups;
  std::vector<SliceRun> runs;
  for (std::size_t g = 0; g < groups; ++g)
    runs.push_back({g * mine * row, (g * per_group + static_cast<std::size_t>(spec.row_begin)) * row, mine * row, 1, 0});
  return runs;
}

void take_slice(std::span<const float> whole, const ParamSpec& spec, std::span<float> mine) {
  if (whole.size() != whole_size(spec) || mine.size() != product(spec.dims))
    throw Error("parameter " + spec.name + ": slice sizes do not match");
  for (const SliceRun& run : slice_runs(spec))
    for (std::size_t b = 0; b < run.blocks; ++b)
      std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(run.whole_offset + b * run.stride), run.count,
                  mine.begin() + static_cast<std::ptrdiff_t>(run.offset + b * run.count));
}

}  // namespace ddl
