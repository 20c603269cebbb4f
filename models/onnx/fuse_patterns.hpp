// Graph rewrites before the layers are built: the layer norm that PyTorch writes out before opset 17
// (ReduceMean, Sub, Pow by 2, ReduceMean, Add epsilon, Sqrt, Div, Mul by a weight, Add a bias; over the last
// axis) becomes one LayerNormalization node, and GELU as nn.GELU exports it (Div by sqrt 2, Erf, Add 1, Mul
// by x, Mul by 0.5) one Gelu node. A piece (graph_piece.hpp) runs them on oneDNN's layer normalization and
// eltwise: one pass and one kept value each instead of five to nine.
#pragma once

#include "models/onnx/onnx_graph.hpp"

namespace ddl::onnx {

void fuse_norms_and_gelus(Graph& graph);

}  // namespace ddl::onnx
