// The dims of what a node computes on images, from its inputs' dims, before any layer is built: what lets
// shape arithmetic read any axis of a value (a vision transformer's x.shape[1]), not only the batch.
#pragma once

#include <optional>
#include <vector>

#include "models/onnx/onnx_graph.hpp"

namespace ddl::onnx {

using Dims = std::vector<std::int64_t>;

// The dims of the node's first output for inputs of these dims (nullopt where an input's are not known, e.g.
// a left-out optional one) and these values (nullptr where an input is not a constant: Reshape's shape,
// Slice's starts and the like must be). nullopt for an operator it does not know, or inputs that do not fit
// it: the layer builder then names the problem. `batch` stands for kBatchTimes in a shape the graph gives.
std::optional<Dims> output_dims(const Node& node, const std::vector<std::optional<Dims>>& dims,
                                const std::vector<const Constant*>& values, std::int64_t batch);

// A Split's sizes along its axis, one for each output, for an input of these dims (null: not known): given
// (its second input, `sizes`), or, where none are (F.glu), equal parts of the axis. nullopt where the sizes are
// an input not known (`sizes` null), or do not fit the input, or equal parts do not divide its axis.
std::optional<Dims> split_sizes(const Node& split, const Dims* input, const Constant* sizes);
// Its axis in an input of these dims (nullopt: out of range).
std::optional<std::size_t> axis_of(const Node& split, const Dims& input);
// Whether a Split is into equal parts (no sizes given).
bool splits_equally(const Node& split);

}  // namespace ddl::onnx
