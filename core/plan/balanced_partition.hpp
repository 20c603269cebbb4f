#pragma once

#include <cstddef>
#include <vector>

namespace ddl {

// Layer counts per stage that minimise the largest stage cost, where a stage's cost is the larger of its
// share of the total time and its share of the total memory (each layer's measured figures). No stage
// starts at a layer `kept_with_previous` marks (empty: none); InputError where that leaves too few places.
std::vector<std::size_t> balanced_partition(const std::vector<double>& time, const std::vector<double>& memory,
                                            int stages, const std::vector<bool>& kept_with_previous = {});

}  // namespace ddl
