// One training process's loop pieces: an epoch of training (forward, loss, backward, gradient averaging
// across replicas, optimizer step) and an evaluation pass, both fed by a BatchLoader and reporting
// figures summed over the replica group.
#pragma once

#include <functional>

#include "core/data/batch_loader.hpp"
#include "core/layers/softmax_cross_entropy.hpp"
#include "core/model.hpp"
#include "core/optim/lr_schedule.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/replica_group.hpp"

namespace ddl {

struct PassMetrics {
  double loss = 0.0;      // mean per image
  double accuracy = 0.0;  // top-1
  double images = 0.0;    // over all replicas
  double seconds = 0.0;
  double images_per_second() const { return seconds > 0 ? images / seconds : 0.0; }
};

struct StepProgress {
  std::size_t step, steps;
  double loss;  // running mean over this replica's steps so far
  double images_per_second;
};

class Trainer {
 public:
  // Subscribes the replica group to the model's gradients-ready hook for its lifetime.
  Trainer(Context& ctx, Model& model, Optimizer& optimizer, const LrSchedule& schedule, ReplicaGroup& group);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains one epoch over the loader's pass; `epoch` counts from 0 and places the learning rate.
  PassMetrics train_epoch(BatchLoader& loader, std::size_t epoch, std::size_t steps,
                          const std::function<void(const StepProgress&)>& progress = {});
  PassMetrics evaluate(BatchLoader& loader);
  float last_lr() const { return last_lr_; }

 private:
  PassMetrics reduce(double loss_sum, double correct, double images, double seconds);

  Context& ctx_;
  Model& model_;
  Optimizer& optimizer_;
  LrSchedule schedule_;
  ReplicaGroup& group_;
  SoftmaxCrossEntropy loss_;
  float last_lr_ = 0.0f;
};

}  // namespace ddl
