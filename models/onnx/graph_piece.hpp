// A piece of an ONNX graph that ddl's layers do not express (a vision transformer's attention and layer
// norms as PyTorch exports them: MatMul, Transpose, Reshape, Softmax, Slice, broadcast arithmetic), taken
// as GraphLayers (core/graph/graph_layer.hpp). The piece runs from a value to the next value that every
// path from it passes through, so the model stays one chain of layers that a pipeline can cut. A piece may
// be cut into parts where a few values cross (graph_piece's `cut` below), one layer each, so a pipeline can
// cut inside it too.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/layers/layer.hpp"
#include "models/onnx/onnx_graph.hpp"

namespace ddl::onnx {

struct GraphPiece {
  struct Part {
    std::unique_ptr<Layer> layer;
    std::vector<std::string> params;  // the initializers its parameters start from, in param_specs() order
    std::vector<std::string> state;   // those its state starts from, in state() order; "" for a generator's
  };
  std::vector<Part> parts;  // in order: one, or several where the piece is cut
  std::string end;          // the value it computes
};

// The most values that may cross a cut inside a piece.
inline constexpr std::size_t kMostCrossing = 4;

// The piece from value `from`; `readers` gives, for each value computed on images, the nodes that read it (a
// node once per input it reads it as), and `from_parameters` the values computed from constants and
// parameters alone (a weight's Transpose before its MatMul). nullopt where no such piece is found, or where
// one of its nodes is one of ddl's layers that a piece does not take (a ChannelShuffle: the caller's own
// refusal then stands). Throws InputError naming the node where an operator is neither, or comes with attributes or
// inputs its operators cannot take.
// `next_seed` gives the seed of each part with random operators (GraphLayer), in order. With `cut`, a piece
// holding more than a sixteenth of the graph's matrix products and convolutions is cut after each such share
// where the rest holds one too, at the first place where at most kMostCrossing values cross, their dims are
// known, no parameter is read on both sides and no product is parted from the bias it takes in
// (docs/onnx.md, "Pieces").
std::optional<GraphPiece> graph_piece(const Graph& graph, const std::string& from,
                                      const std::map<std::string, std::vector<std::size_t>>& readers,
                                      const std::set<std::string>& from_parameters,
                                      const std::function<std::uint64_t()>& next_seed, bool cut);

}  // namespace ddl::onnx
