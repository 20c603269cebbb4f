// A training job: what outlives its layouts. ddl_train sets up one job, then trains it in a session of one
// layout (session.hpp) after another, for as long as re-planning moves it to a new layout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/data/batch_loader.hpp"
#include "core/train/checkpoint.hpp"
#include "core/train/directory_lock.hpp"
#include "core/train/timeline.hpp"
#include "launch/metrics_log.hpp"
#include "launch/mlperf_log.hpp"
#include "launch/replanner.hpp"
#include "launch/tensorboard_log.hpp"
#include "launch/train/injected_faults.hpp"
#include "launch/train_options.hpp"
#include "models/registry.hpp"

namespace ddl {

// What a job decides once, at its start, from the options, the ranks' machines and the data (each with its
// reason printed in the header); read only after. A layout's own choices are the session's (layout_choice).
struct JobSettings {
  TrainOptions options;  // as given, --global-batch's share of the world as the batch a strategy profiles
  int threads = 1;
  int loader_threads = 1;       // decoding an encoded dataset's images, the loader's own thread among them
  bool decodes_images = false;  // the training set is encoded: the loader decodes JPEG files
  std::string placement_note;   // where the compute and loader threads run (thread_placement.hpp)
  int ranks_per_node = 1;       // the largest node's: the whole job's where it runs on one node
  std::string nodes;            // "3 nodes: host1 x2, ..." where the job spans several hosts
  dnnl::memory::data_type compute_type = dnnl::memory::data_type::f32;
  Preprocessing prep;                                 // of the training images; a session sets the type its model takes
  std::vector<std::size_t> train_subset, val_subset;  // dataset indices used for training / validation
  double cache_bytes = 0;  // of training images to keep in memory (the planner leaves them room)
};

struct Job {
  // Collective over `world`: checks the options against this CPU and the data, on every rank alike, and
  // settles the job's settings. Throws InputError.
  Job(TrainOptions given, const Communicator& ranks);
  // After the first session's set-up: the checkpoint folder made, and rank 0's check of the metrics file's
  // folder and its lock on the checkpoint folder, which the job holds through every layout. Throws InputError.
  void prepare_outputs();
  // Once the first session's models hold an imported graph's weights: the job keeps the graph without
  // them, as checkpoints do (later sessions take every value from the state the last one hands on).
  void forget_graph_weights();

  Job(const Job&) = delete;  // `options` refers into its own settings
  Job& operator=(const Job&) = delete;

  const Communicator& world;
  MlperfLog::Clock::time_point began = MlperfLog::Clock::now();  // MLPerf's init_start, before any set-up
  // --checkpoint-every counts from the job's last checkpoint, whatever layout wrote it.
  std::chrono::steady_clock::time_point last_checkpoint = std::chrono::steady_clock::now();
  // Set up with the settings (declared before them: the constructor fills them while it settles those).
  ModelConfig config;            // an imported graph's loses its weights once the first models hold them
  std::unique_ptr<Model> whole;  // not finalized: its layers, to choose and check layouts by
  TrainingState state;           // the training's: epochs and steps done, best accuracy, what checkpoints keep
  std::string init_note;         // what --init did, for rank 0's header
  std::string cache_note;        // --cache-images: what was kept in memory, or why not
  const JobSettings settings;
  const TrainOptions& options = settings.options;
  const std::string given_options;  // "--name value ..." as the user gave them, for the header

  std::string resume_path;  // the checkpoint the job resumed from
  std::shared_ptr<const ImageCache> image_cache;
  std::optional<Replanner> replanner;              // a planned job that re-plans (--replan-every)
  unsigned long long steps_run = 0;                // training steps of this process, over every layout
  std::uint64_t steps_since_checkpoint = 0;
  std::unique_ptr<DirectoryLock> checkpoint_lock;  // rank 0's, with a checkpoint folder
  std::optional<MetricsLog> metrics;               // rank 0's, with --metrics
  std::optional<TensorBoardLog> tensorboard;       // rank 0's, with --tensorboard, from the first epoch trained
  std::optional<MlperfLog> mlperf;                 // rank 0's, with --mlperf-log
  bool mlperf_run_started = false;                 // its run_start written (the first layout's)
  Timeline timeline;                               // --timeline: every layout's events
  InjectedFaults faults;                           // a test build's; none in ddl_train
};

// "32x32x3": height x width x channels.
std::string image_shape(const ImageDataset& dataset);

}  // namespace ddl
