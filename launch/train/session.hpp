// A layout's session: what a job trains with in one layout (the process grid, this rank's model or stage
// and its copies for the micro-batches in flight, the optimizer, the loaders), built from the layout and
// released before a re-plan's move builds the next.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_grid.hpp"
#include "core/context.hpp"
#include "core/data/batch_loader.hpp"
#include "core/optim/lr_schedule.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/trainer.hpp"
#include "launch/train/job.hpp"
#include "launch/train/layout_choice.hpp"

namespace ddl {

class Session {
 public:
  // Collective over the job's ranks. A job's first session reads the training images into memory where
  // --cache-images asks; later ones take those the job holds. Throws InputError.
  Session(Job& job, ChosenLayout chosen, bool first_of_job);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Layout& layout() const { return chosen.layout; }
  const GridPosition& position() const { return grid.position(); }
  std::vector<Model*> model_copies();  // the model and its copies, one a micro-batch in flight

  ChosenLayout chosen;  // its cut filled in where it was measured
  Context ctx;
  ProcessGrid grid;
  std::string partition_report;                // with S > 1: each stage's layers
  std::unique_ptr<Model> model;                // the whole model, or this rank's stage
  std::vector<std::unique_ptr<Model>> copies;  // sharing its parameters: micro-batches in flight
  MicroBatching micro_batching;
  std::unique_ptr<Optimizer> optimizer;
  LrSchedule schedule;
  std::optional<BatchLoader> train_loader, val_loader;  // on the first stage only
};

}  // namespace ddl
