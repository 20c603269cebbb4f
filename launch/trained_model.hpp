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
  TrainingState state;  // class_names: "0", "1", ... where the checkpoint holds none
};

// Throws InputError naming `path` for a missing, damaged or foreign file.
TrainedModel load_trained_model(const std::string& path, Context& ctx);

// How images are prepared for the model as in its training run, without augmentation: the model's input
// size and the run's normalisation. Throws InputError for stored values that do not fit the model, and for
// a checkpoint of ddl_train --normalize meanstd (without --mean and --std) written before checkpoints held
// the values (format 2).
Preprocessing trained_input(const TrainedModel& trained, const std::string& path);

// The "key = value" lines of a run's configuration (TrainOptions::describe); lists ("mean += 0.5", a value
// a line) are not among them.
std::map<std::string, std::string> configuration_values(const std::string& text);

}  // namespace ddl
