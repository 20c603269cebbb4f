// Models by name. A definition only lists layers (core/); every training strategy uses the same one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/model.hpp"

namespace ddl {

struct ModelConfig {
  int num_classes = 10;
  std::uint64_t seed = 0;  // for layers that draw random numbers (dropout)
};

// Builds, finalizes and returns the model; parameters are not initialised yet (Model::initialize).
std::unique_ptr<Model> make_model(const std::string& name, const ModelConfig& config, Context& ctx);
std::vector<std::string> model_names();

// Definitions, one per file.
std::unique_ptr<Model> seed_cnn(const ModelConfig& config);
std::unique_ptr<Model> seed_cnn_bn(const ModelConfig& config);

}  // namespace ddl
