// One training process's loop pieces: an epoch of training and an evaluation pass, reporting figures
// summed over every replica. A step splits its batch into micro-batches and runs their forward and
// backward passes in the order of a pipeline schedule: on a whole model that is gradient accumulation; on
// one stage of a pipeline, activations and gradients are exchanged with the neighbouring stages through
// a StageLink. Gradients are summed over the micro-batches in the model's one gradient buffer, averaged
// across the replica group, and the optimizer steps once.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "core/data/batch_loader.hpp"
#include "core/layers/relayout.hpp"
#include "core/layers/softmax_cross_entropy.hpp"
#include "core/model.hpp"
#include "core/optim/lr_schedule.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/pipeline_schedule.hpp"
#include "core/train/replica_group.hpp"
#include "core/train/sharded_parameters.hpp"
#include "core/tensor_group.hpp"
#include "core/train/stage_link.hpp"
#include "core/train/timeline.hpp"

namespace ddl {

struct PassMetrics {
  double loss = 0.0;      // mean per image
  double accuracy = 0.0;  // top-1
  double images = 0.0;    // over all replicas
  double seconds = 0.0;
  std::size_t steps = 0;  // training: the steps run (fewer than asked when stopped)
  double images_per_second() const { return seconds > 0 ? images / seconds : 0.0; }
};

struct StepProgress {
  std::size_t step, steps;
  double loss;  // running mean over this replica's steps so far
  double images_per_second;
};

struct EpochHooks {
  std::function<void(const StepProgress&)> progress;
  // Runs after every step, on every rank: true ends the epoch there (the ranks must agree).
  std::function<bool()> after_step;
};

struct MicroBatching {
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::gpipe;
  std::size_t batch_size = 0;  // per replica; the batch a stage without a loader processes each step
};

class Trainer {
 public:
  // slots: copies of this rank's model (or stage) sharing the parameters of slots[0], one for each
  // micro-batch the schedule keeps in flight (slots_needed). link: null for a whole model. tensor: the
  // ranks this one splits layers with (null: none); when a split layer gathers their batch, the loss
  // covers the group's images. The gradients of whole parameters are averaged over the group as well: below
  // a gather each rank trained them on its own images, elsewhere the average keeps the copies alike.
  // label_smoothing: the loss's (softmax_cross_entropy.hpp), in training and evaluation alike.
  // Subscribes to the models' gradients-ready hooks for its lifetime.
  Trainer(Context& ctx, std::vector<Model*> slots, Optimizer& optimizer, const LrSchedule& schedule,
          ReplicaGroup& replicas, StageLink* link, const MicroBatching& batching, TensorGroup* tensor = nullptr,
          float label_smoothing = 0.0f);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  static int slots_needed(const MicroBatching& batching, int stage, int stages);

  // Trains one epoch of `steps` steps from step first_step (a resumed epoch); `epoch` counts from 0 and
  // places the learning rate. The first stage takes its batches from the loader (started at first_step);
  // later stages pass null.
  PassMetrics train_epoch(BatchLoader* loader, std::size_t epoch, std::size_t steps, std::size_t first_step = 0,
                          const EpochHooks& hooks = {});
  // `images`: how many this replica evaluates, in batches of batching.batch_size (the loader's, on the first stage).
  PassMetrics evaluate(BatchLoader* loader, std::size_t images);
  float last_lr() const { return last_lr_; }
  // Where the replica group shards the parameters (ZeRO's stage 3), gathers them whole for what reads them
  // between steps (checkpoints); train_epoch and evaluate leave them whole anyway.
  void whole_parameters() {
    if (sharded_params_) sharded_params_->make_whole();
  }
  // Records spans into `timeline` from now on (null: none).
  void record(Timeline* timeline) { timeline_ = timeline; }

 private:
  struct StepSums {
    double loss = 0, correct = 0, images = 0;  // images: those the loss covered (the last stage's)
  };
  StepSums run_step(const Batch* batch, std::size_t n, Mode mode);
  void forward(const Batch* batch, int m, std::size_t micro, Mode mode, StepSums& sums);
  void backward(int m);
  dims_t input_dims(const Batch* batch, std::size_t micro, Mode mode);
  void gradients_ready(std::size_t offset, std::size_t count);
  void average_whole_over_group();
  void carry_state(std::size_t to);
  PassMetrics reduce(double loss_sum, double correct, double images, double seconds);
  int stage() const { return link_ ? link_->stage() : 0; }
  int stages() const { return link_ ? link_->stages() : 1; }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() + 1 == stages(); }
  bool group_batch(Mode mode) const { return tensor_ && mode == Mode::train && slots_[0]->gathers_batch(); }

  Context& ctx_;
  std::vector<Model*> slots_;
  Optimizer& optimizer_;
  LrSchedule schedule_;
  ReplicaGroup& replicas_;
  StageLink* link_;
  MicroBatching batching_;
  TensorGroup* tensor_;
  SoftmaxCrossEntropy loss_;
  float last_lr_ = 0.0f;
  Timeline* timeline_ = nullptr;

  // Per step.
  int micro_batches_ = 1, slots_in_use_ = 1, backwards_done_ = 0;
  std::size_t last_forward_slot_ = 0;
  std::vector<std::int32_t> labels_;  // the last stage's copy, from the first
  std::vector<std::int32_t> group_labels_;  // a micro-batch's labels of every rank of the tensor group
  std::vector<std::pair<std::size_t, std::size_t>> whole_ranges_;  // Model::whole_param_ranges()
  std::vector<float> whole_grads_;  // the whole parameters' gradients, packed for one all-reduce
  std::vector<Tensor> inputs_, outputs_, received_gradients_, sent_gradients_, diff_logits_;  // one per micro-batch
  std::vector<Tensor> received_activations_;  // in bf16 runs: the messages, before inputs_ takes them as f32
  // Shapes exchanged once per micro-batch size and mode (a split layer that gathers its group's batch in
  // training gives another shape in evaluation): received from the previous stage, sent to the next.
  using ShapeKey = std::pair<std::size_t, Mode>;
  std::vector<std::pair<ShapeKey, dims_t>> input_dims_;
  std::vector<ShapeKey> dims_sent_;
  dnnl::memory::desc to_plain_from_, from_plain_to_;
  std::optional<Copy> to_plain_;
  Relayout from_plain_;
  std::optional<ShardedParameters> sharded_params_;  // ZeRO's stage 3
};

}  // namespace ddl
