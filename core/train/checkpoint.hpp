// Checkpoints in HDF5: the flat parameter buffer, every layer's state (BatchNorm statistics, dropout
// generators), the optimizer's state, the epoch count, the best validation accuracy and the run's
// configuration. Written to a temporary file, flushed to disk, then renamed over the old one, so a crash
// or a full disk at any moment leaves the previous checkpoint intact. Every value is checksummed, so a
// flipped bit or a truncated copy is refused on loading instead of silently training another model.
//
// A pipeline writes the same file as a single process: its stages take turns, in order, each adding its
// slice of the parameters and of the optimizer's arrays and its layers' state (a shared file system is
// assumed), and the last stage publishes the file. Ranks that split a layer write their slices of it the
// same way. Any stage of any layout reads back its own slices, so a run can resume or be evaluated with
// another number of stages, replicas or ranks per split layer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "core/optim/optimizer.hpp"

namespace ddl {

struct TrainingState {
  std::string model_name;
  std::uint64_t epochs_done = 0;
  double best_accuracy = -1.0;
  std::uint64_t seed = 0;
  std::string configuration;  // the options the run was started with, one "key = value" a line
  std::uint64_t steps_done = 0;  // of the next epoch, when a run was stopped in the middle of it
  // What evaluation and prediction need besides the weights (format 3; empty in older checkpoints): the
  // training set's class names, and the per-channel normalisation its images had (empty: pixel / 255).
  std::vector<std::string> class_names;
  std::vector<double> input_mean, input_std;
  // A model imported from an ONNX graph (absent for a built-in model): the graph without the weights
  // this file holds, so that the checkpoint alone rebuilds the model, and each parameter's and state's
  // name there, "<ddl name>=<graph name>" (models/onnx/graph_model.hpp), for export back.
  std::vector<std::uint8_t> graph;
  std::vector<std::string> graph_names;
};

// keep_previous: the file that `path` held, if any, stays as previous_checkpoint(path).
void save_checkpoint(const std::string& path, Model& model, Optimizer& optimizer, const TrainingState& state,
                     bool keep_previous = false);
// Which part of a checkpoint a rank writes: the first writer creates the file; of the ranks that split a
// stage's layers (each writing its slices), one writes the layers' state. Where the optimizer's state is
// sharded (ShardedOptimizer), the first replica writes the parameters and its shards, and each other
// replica only its shards (params false).
struct CheckpointPart {
  bool creates = true;
  bool layer_state = true;
  bool params = true;
};
// The pieces of save_checkpoint for a pipeline: every stage (every rank of a stage's tensor group) in
// turn, then the last one publishes.
void write_checkpoint_part(const std::string& path, Model& stage, Optimizer& optimizer, const TrainingState& state,
                           CheckpointPart part);
void publish_checkpoint(const std::string& path, bool keep_previous = false);
// "dir/last.h5" -> "dir/last.prev.h5".
std::string previous_checkpoint(const std::string& path);
// Restores model (or stage) parameters and state, and the optimizer's state when one is given; checks
// that the checkpoint was written for this model, and every checksum: a damaged file is refused with an
// InputError naming it and the tensor (model and optimizer may then hold part of its values).
TrainingState load_checkpoint(const std::string& path, Model& model, Optimizer* optimizer);

// The same checkpoint held in memory as an HDF5 file image, which ranks pass to each other: how ddl_train
// moves a run to another layout without the disk. Each part opens the image, adds its slices and replaces
// it (`part.creates`: starts a new one).
void write_checkpoint_image_part(std::vector<char>& image, Model& stage, Optimizer& optimizer, const TrainingState& state,
                           CheckpointPart part);
TrainingState load_checkpoint_image(std::span<const char> image, Model& model, Optimizer* optimizer);

}  // namespace ddl
