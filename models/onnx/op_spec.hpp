// An ONNX node as ddl's operators read it (core/graph/operator.hpp): its type, its name for messages, its
// attributes, and its integer constant inputs (shapes, axes, bounds, masks) as numbers. The caller numbers
// the inputs that are values.
#pragma once

#include "core/graph/operator.hpp"
#include "models/onnx/onnx_graph.hpp"

namespace ddl::onnx {

// `constants`: for each input, its constant where it is one (nullptr otherwise); `source` names the graph.
OpSpec op_spec(const std::string& source, const Node& node, const std::vector<const Constant*>& constants);
// The same, with the constants the graph holds.
OpSpec op_spec(const Graph& graph, const Node& node);

}  // namespace ddl::onnx
