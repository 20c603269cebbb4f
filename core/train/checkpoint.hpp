// Checkpoints in HDF5: the flat parameter buffer, every layer's state (BatchNorm statistics, dropout
// generators), the optimizer's state, the epoch count, the best validation accuracy and the run's
// configuration. Written to a temporary file, flushed to disk, then renamed over the old one, so a crash
// or a full disk at any moment leaves the previous checkpoint intact.
#pragma once

#include <cstdint>
#include <string>

#include "core/model.hpp"
#include "core/optim/optimizer.hpp"

namespace ddl {

struct TrainingState {
  std::string model_name;
  std::uint64_t epochs_done = 0;
  double best_accuracy = -1.0;
  std::uint64_t seed = 0;
  std::string configuration;  // the options the run was started with, one "key = value" a line
};

void save_checkpoint(const std::string& path, Model& model, Optimizer& optimizer, const TrainingState& state);
// Restores model parameters and state, and the optimizer's state when one is given; checks that the
// checkpoint was written for this model.
TrainingState load_checkpoint(const std::string& path, Model& model, Optimizer* optimizer);

}  // namespace ddl
