#include "launch/train/session.hpp"

#include <chrono>
#include <cstdio>

#include "comm/allreduce.hpp"
#include "core/error.hpp"
#include "launch/stage_partition.hpp"
#include "launch/train/on_every_rank.hpp"
#include "launch/optimizer_choice.hpp"

namespace ddl {
namespace {

// Reads the training images into memory, or takes those the previous layout read (a re-plan's move). A
// rank that read none before a move reads none after it: the other ranks would wait for it in a collective
// under the training's time limit. Collective over the job's ranks.
void keep_training_images_in_memory(Job& job, Session& session, bool first_of_job) {
  if (job.settings.cache_bytes == 0) return;
  on_every_rank(job.world, "reading the training images into memory", [&] {
    if (!session.train_loader) return job.image_cache.reset();
    if (job.image_cache) return session.train_loader->keep_in_memory(job.image_cache);
    if (!first_of_job) return;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      job.image_cache = session.train_loader->keep_in_memory(job.settings.train_subset);
    } catch (const std::bad_alloc&) {
      throw InputError("--cache-images: no memory for the " +
                       std::to_string(static_cast<long long>(job.settings.cache_bytes / 1e6)) +
                       " MB of training images (--cache-images off reads them from the file every step)");
    }
    char note[160];
    std::snprintf(note, sizeof note, "training images in memory: %zu (%.0f MB) read in %.2f s",
                  job.image_cache->images(), static_cast<double>(job.image_cache->bytes()) / 1e6,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    job.cache_note = note;
  });
}

// The loaders of a first stage: training and validation batches of `batch` images.
void open_loaders(const Job& job, Session& session, const Preprocessing& prep) {
  const TrainOptions& o = job.options;
  const auto batch = static_cast<std::size_t>(session.layout().batch);
  const auto prefetch = static_cast<std::size_t>(o.prefetch_batches);
  session.train_loader.emplace(o.train_path, prep, batch, session.ctx, prefetch);
  Preprocessing eval_prep = prep;
  eval_prep.random_flip = false;
  eval_prep.random_crop_padding = 0;
  eval_prep.random_resized_crop = false;
  if (!o.val_path.empty())
    session.val_loader.emplace(o.val_path, eval_prep, batch, session.ctx, prefetch);
  else if (o.val_fraction > 0)
    session.val_loader.emplace(o.train_path, eval_prep, batch, session.ctx, prefetch);
}

}  // namespace

Session::Session(Job& job, ChosenLayout chosen_layout, bool first_of_job)
    : chosen(std::move(chosen_layout)), grid(job.world, chosen.layout) {
  const TrainOptions& o = job.options;
  Layout& l = chosen.layout;
  const GridPosition& p = grid.position();
  ctx.set_compute_type(job.settings.compute_type);
  LayerSplit split;
  if (l.tensor > 1) split = {l.split, grid.tensor_group()};
  StagePartition partition = choose_partition(o, l, job.config, *job.whole, p.stage, grid.pipeline(), job.world, ctx);
  l.cut = std::move(partition.counts);
  partition_report = std::move(partition.report);
  if (first_of_job) job.state.configuration = o.describe(l);  // a resumed job's is its checkpoint's
  const LayerRange range = stage_range(l.cut, p.stage);
  model = make_model(o.model, job.config, ctx, range, nullptr, split);
  model->initialize(o.seed);
  job.forget_graph_weights();  // copies take the model's values (finalize), never the graph's
  micro_batching = {l.micro_batches, l.schedule, static_cast<std::size_t>(l.batch)};
  for (int c = 1; c < Trainer::slots_needed(micro_batching, p.stage, l.stages); ++c)
    copies.push_back(make_model(o.model, job.config, ctx, range, model.get(), split));
  model->recompute_activations(l.recomputes(p.stage));
  for (auto& copy : copies) copy->recompute_activations(l.recomputes(p.stage));

  Preprocessing prep = job.settings.prep;
  prep.type = model->input_type(ctx);
  if (p.stage == 0) open_loaders(job, *this, prep);
  if (job.settings.train_subset.size() < static_cast<std::size_t>(l.global_batch()))
    throw InputError("the training set has " + std::to_string(job.settings.train_subset.size()) +
                     " images, fewer than one global batch of " + std::to_string(l.global_batch()));

  if (l.shards_optimizer_state()) {
    const Communicator& replicas = grid.stage_replicas();
    const IndexRange shard = ring_shard(model->param_count(), replicas.size(), replicas.rank());
    // A layer-wise optimizer's trust ratios take the norms of whole arrays, whose pieces other replicas hold.
    const auto sum_over_replicas = [&replicas](std::span<double> sums) { replicas.allreduce_sum(sums); };
    optimizer = make_optimizer(o, *model, {shard, sum_over_replicas});
  } else {
    optimizer = make_optimizer(o, *model);
  }
  // --scale-lr multiplies by the global batch over the batch given: under a strategy, the ranks.
  const int scale = o.strategy == Strategy::manual ? l.data_ranks() : job.world.size();
  const float lr = o.scale_lr ? o.lr * static_cast<float>(scale) : o.lr;
  schedule = {o.lr_policy, lr, o.warmup_epochs, o.lr_step_epochs, o.lr_gamma, static_cast<float>(o.epochs), o.lr_power};
  keep_training_images_in_memory(job, *this, first_of_job);
}

std::vector<Model*> Session::model_copies() {
  std::vector<Model*> all{model.get()};
  for (auto& c : copies) all.push_back(c.get());
  return all;
}

}  // namespace ddl
