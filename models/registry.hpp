// Models by name. A definition only lists layers (core/); every training strategy uses the same one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/error.hpp"
#include "core/model.hpp"

namespace ddl {

namespace onnx {
struct Graph;
}

// An ONNX graph to build the model from (models/onnx/graph_model.hpp): a file's bytes, or a checkpoint's
// copy without the weights it holds itself (the initializers named in weights_elsewhere), and the graph read,
// checked and rewritten from them once a job (`prepared`), which each model made copies.
struct GraphBytes {
  std::string bytes;
  std::set<std::string> weights_elsewhere;
  std::shared_ptr<const onnx::Graph> prepared;
};

// What a user may change about a model; 0 (or a negative dropout) keeps the model's own value.
struct ModelConfig {
  int num_classes = 10;
  std::uint64_t seed = 0;  // for layers that draw random numbers (dropout)
  int image_size = 0;      // input height = width
  float dropout = -1.0f;   // classifier dropout of the CNNs; attention and MLP dropout of the transformers
  // Vision transformers only.
  int patch_size = 0;
  int depth = 0;  // encoder blocks
  int width = 0;  // hidden size D (the MLP is 4 D wide)
  int heads = 0;
  // Set for a model imported from ONNX (--model FILE.onnx), which every copy and stage builds from.
  std::shared_ptr<const GraphBytes> graph = nullptr;
};

// The value a model uses: the user's when given, the model's own otherwise.
inline int chosen(int user, int model_default) { return user > 0 ? user : model_default; }
inline float chosen_dropout(const ModelConfig& c, float model_default) {
  return c.dropout >= 0.0f ? c.dropout : model_default;
}
// A distinct generator seed for the k-th random layer of a model.
inline std::uint64_t layer_seed(const ModelConfig& c, std::uint64_t k) {
  return c.seed ^ (0x9E3779B97F4A7C15ull * (k + 1));
}

// Layers [begin, end) of a model: one pipeline stage. end 0 means up to the last layer.
struct LayerRange {
  std::size_t begin = 0, end = 0;
};

// Dense layers split across a tensor group (Model::split_layers); none when `layers` is empty.
struct LayerSplit {
  std::vector<std::size_t> layers;  // indices in the whole model
  TensorGroup* group = nullptr;
};

// The model's layers, not finalized: to count layers and parameters before choosing pipeline stages.
std::unique_ptr<Model> define_model(const std::string& name, const ModelConfig& config);
// Builds, finalizes and returns the model, or the stage of it in `stage`; parameters are not initialised
// yet (Model::initialize). With `share`, the copy binds to that copy's parameters (Model::finalize).
std::unique_ptr<Model> make_model(const std::string& name, const ModelConfig& config, Context& ctx,
                                  LayerRange stage = {}, Model* share = nullptr, const LayerSplit& split = {});
std::vector<std::string> model_names();

// Definitions, one per file.
std::unique_ptr<Model> seed_cnn(const ModelConfig& config);
std::unique_ptr<Model> seed_cnn_bn(const ModelConfig& config);
std::unique_ptr<Model> alexnet(const ModelConfig& config);
std::unique_ptr<Model> alexnet_cifar(const ModelConfig& config);
std::unique_ptr<Model> vgg16(const ModelConfig& config);
std::unique_ptr<Model> vgg16_cifar(const ModelConfig& config);
std::unique_ptr<Model> resnet18(const ModelConfig& config);
std::unique_ptr<Model> resnet18_cifar(const ModelConfig& config);
std::unique_ptr<Model> resnet50(const ModelConfig& config);
std::unique_ptr<Model> resnet50_cifar(const ModelConfig& config);
std::unique_ptr<Model> vit_b16(const ModelConfig& config);
std::unique_ptr<Model> vit_tiny(const ModelConfig& config);

}  // namespace ddl
