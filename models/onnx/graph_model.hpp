// A model from an ONNX graph (onnx_graph.hpp): the graph's nodes become ddl's layers, the same ones the
// built-in models are made of, so an imported network trains through the same model, trainer, pipeline
// and split-layer code. A chain of nodes becomes a chain of layers, one model layer each, so a pipeline
// can cut between any two; where a value forks and the two paths meet again in an Add, the paths become
// a residual block (one layer: a pipeline never separates its paths), or where they hold a large share of
// the graph's products (a U-Net's skip connections), a Fork, the longer path's layers and a Join in the
// chain (core/layers/open_block.hpp). A ReLU whose input nothing else reads is fused into the Conv,
// BatchNormalization, Gemm or residual Add before it.
//
// The model starts from the graph's initializers (Model::set_starting_values), so a PyTorch user's own
// initialisation is kept. Where the run's class count differs from the graph's and the last node is a Gemm,
// that classifier is built for the run's classes and starts from drawn values (fine-tuning).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/onnx/onnx_graph.hpp"
#include "models/registry.hpp"

namespace ddl {

struct GraphModel {
  std::unique_ptr<Model> model;  // not finalized
  // ddl's parameter and state names ("3.body.0.weight") to the graph's initializer names: what the
  // checkpoint keeps for export back to PyTorch and ONNX.
  std::map<std::string, std::string> onnx_names;
  std::string fresh_classifier;  // the classifier's parameters, when they start afresh; else empty
};

// The model of config.graph (a copy of its prepared graph), named after `name`'s file name (FILE.onnx). Throws
// InputError naming the graph and the node for an operator or attribute ddl does not support (docs/onnx.md
// lists what it does).
GraphModel define_graph_model(const std::string& name, const ModelConfig& config);
// Whether a --model value names an ONNX file rather than a built-in model.
bool is_graph_file(const std::string& model);
// An ONNX file's bytes and the graph read, checked and rewritten from them, for ModelConfig::graph (a missing,
// unreadable or malformed file is an InputError naming it).
std::shared_ptr<const GraphBytes> read_graph_file(const std::string& path);
// The graph as checkpoints keep it: `bytes` without the weights that `graph_names` ("ddl name=graph name",
// TrainingState::graph_names) name, whose values come from elsewhere. `source` names it in messages.
std::shared_ptr<const GraphBytes> graph_without_weights(std::string bytes, const std::vector<std::string>& graph_names,
                                                        const std::string& source);

}  // namespace ddl
