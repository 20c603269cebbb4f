// Graph rewrites before the layers are built. Patterns that PyTorch writes out op by op become one node each,
// which a piece (graph_piece.hpp) runs on one oneDNN primitive or one loop, keeping one value instead of several:
// the layer norm before opset 17 (ReduceMean, Sub, Pow by 2, ReduceMean, Add epsilon, Sqrt, Div, Mul by a
// weight, Add a bias; over the last axis) one LayerNormalization; GELU as nn.GELU exports it (Div by sqrt 2,
// Erf, Add 1, Mul by x, Mul by 0.5) one Gelu; Mish (x * Tanh(Softplus(x))) one Mish; nn.GroupNorm (Reshape to
// [N, groups, -1], InstanceNormalization, Reshape back, Mul and Add of per-channel parameters) one
// GroupNormalization. ShuffleNet's channel shuffle (Reshape to [N, g, C / g, H, W], Transpose of axes 1 and
// 2, Reshape back) becomes one ChannelShuffle node, and a Split one Slice for each of its outputs, so that
// its parts are paths from one value like any other fork. A rewrite is chosen where its pattern matches;
// a graph trains the same without it.
#pragma once

#include "models/onnx/onnx_graph.hpp"

namespace ddl::onnx {

// GroupNormalization reads the initializers of GroupNorm's weight and bias, so that the parameters keep their
// names; the Unsqueezes that shaped them are left unread.
void fuse_norms_and_activations(Graph& graph);
// Reads the folded shapes (fold_constants): ChannelShuffle's attributes are `group` and `image`, the [C, H, W]
// the reshapes are for.
void fuse_channel_shuffles(Graph& graph);
// Throws InputError naming a Split whose sizes are not given (ddl does not split evenly by itself).
void split_into_slices(Graph& graph);

}  // namespace ddl::onnx
