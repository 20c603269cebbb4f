// Where activation recomputation cuts a chain of layers (Chen et al., 2016, "Training Deep Nets with
// Sublinear Memory Cost"): about sqrt(layers) segments of about equal output bytes, so that a CNN's first
// layers, whose outputs are the largest, get shorter segments and no one segment's activations, alive in
// its backward, hold most of the memory again. The model recomputes by it and the planner costs by it.
#pragma once

#include <cstddef>
#include <vector>

namespace ddl {

// Each layer's segment (0, 1, ...), from each layer's output bytes.
std::vector<std::size_t> recompute_segments(const std::vector<double>& output_bytes);

}  // namespace ddl
