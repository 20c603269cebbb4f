#pragma once

#include <cstddef>
#include <vector>

namespace ddl {

// Layer counts per stage that minimise the largest stage cost, where a stage's cost is the larger of its
// share of the total time and its share of the total memory (each layer's measured figures).
std::vector<std::size_t> balanced_partition(const std::vector<double>& time, const std::vector<double>& memory,
                                            int stages);

}  // namespace ddl
