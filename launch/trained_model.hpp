// A model restored from a ddl_train checkpoint for evaluation, prediction and description: rebuilt from
// the settings it was trained with (the checkpoint's configuration), its weights and layer state loaded
// with every checksum verified, together with the class names and the input normalisation of its
// training run, so that images are prepared as they were in training (without augmentation).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/context.hpp"
#include "core/data/batch_loader.hpp"
#include "core/model.hpp"
#include "core/train/checkpoint.hpp"
#include "models/registry.hpp"

namespace ddl {

struct TrainedModel {
  std::unique_ptr<Model> model;
  ModelConfig config;
  TrainingState state;  // class_names: "0", "1", ... when the checkpoint predates stored names
  Preprocessing input;  // the model's input size, the training run's normalisation
};

// Throws InputError naming `path` for a missing, damaged or foreign file, and for a checkpoint of
// ddl_train --normalize meanstd written before checkpoints held the values (format 2).
TrainedModel load_trained_model(const std::string& path, Context& ctx);

// The "key = value" lines of a run's configuration (TrainOptions::describe); a key given on several lines
// ("mean += 0.5") gets their values joined.
std::map<std::string, std::string> configuration_values(const std::string& text);

}  // namespace ddl
