#include "models/registry.hpp"

#include <utility>

#include "core/error.hpp"
#include "models/onnx/graph_model.hpp"

namespace ddl {
namespace {

using Factory = std::unique_ptr<Model> (*)(const ModelConfig&);

const std::vector<std::pair<std::string, Factory>>& table() {
  static const std::vector<std::pair<std::string, Factory>> models = {
      {"seed_cnn", &seed_cnn},
      {"seed_cnn_bn", &seed_cnn_bn},       {"alexnet", &alexnet},   {"alexnet_cifar", &alexnet_cifar},
      {"vgg16", &vgg16},                   {"vgg16_cifar", &vgg16_cifar},
      {"resnet18", &resnet18},             {"resnet18_cifar", &resnet18_cifar},
      {"resnet50", &resnet50},             {"resnet50_cifar", &resnet50_cifar},
      {"vit_b16", &vit_b16},               {"vit_tiny", &vit_tiny},
  };
  return models;
}

}  // namespace

std::unique_ptr<Model> define_model(const std::string& name, const ModelConfig& config) {
  if (config.num_classes < 2) throw InputError("a model needs at least 2 classes");
  if (config.graph) return define_graph_model(name, config).model;
  for (const auto& [n, factory] : table())
    if (n == name) return factory(config);
  std::string known;
  for (const auto& [n, f] : table()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown model '" + name + "' (known: " + known + ")");
}

std::unique_ptr<Model> make_model(const std::string& name, const ModelConfig& config, Context& ctx, LayerRange stage,
                                  Model* share, const LayerSplit& split) {
  auto model = define_model(name, config);
  if (!split.layers.empty()) model->split_layers(split.layers, *split.group);
  if (stage.begin != 0 || stage.end != 0)
    model->keep_layers(stage.begin, stage.end == 0 ? model->num_layers() : stage.end);
  model->finalize(ctx, share);
  return model;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [n, f] : table()) names.push_back(n);
  return names;
}

}  // namespace ddl
