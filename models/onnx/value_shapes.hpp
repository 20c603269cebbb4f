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
// it: the layer builder then names the problem.
std::optional<Dims> output_dims(const Node& node, const std::vector<std::optional<Dims>>& dims,
                                const std::vector<const Constant*>& values);

}  // namespace ddl::onnx
