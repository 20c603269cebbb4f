// Graph rewrites before the layers are built: the layer norm that PyTorch writes out before opset 17
// (ReduceMean, Sub, Pow by 2, ReduceMean, Add epsilon, Sqrt, Div, Mul by a weight, Add a bias; over the last
// axis) becomes one LayerNormalization node, and GELU as nn.GELU exports it (Div by sqrt 2, Erf, Add 1, Mul
// by x, Mul by 0.5) one Gelu node. A piece (graph_piece.hpp) runs them on oneDNN's layer normalization and
// eltwise: one pass and one kept value each instead of five to nine. ShuffleNet's channel shuffle (Reshape
// to [N, g, C / g, H, W], Transpose of axes 1 and 2, Reshape back) becomes one ChannelShuffle node, and a
// Split one Slice for each of its outputs, so that its parts are paths from one value like any other fork.
#pragma once

#include "models/onnx/onnx_graph.hpp"

namespace ddl::onnx {

void fuse_norms_and_gelus(Graph& graph);
// Reads the folded shapes (fold_constants): ChannelShuffle's attributes are `group` and `image`, the [C, H, W]
// the reshapes are for.
void fuse_channel_shuffles(Graph& graph);
// Throws InputError naming a Split whose sizes are not given (ddl does not split evenly by itself).
void split_into_slices(Graph& graph);

}  // namespace ddl::onnx
