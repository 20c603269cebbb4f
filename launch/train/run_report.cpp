#include "launch/train/run_report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "core/error.hpp"
#include "launch/train/progress_mark.hpp"
#include "launch/trained_model.hpp"

namespace ddl {
namespace {

// "ranks 4 in a grid 2 x 2 (replicas x stages), threads per rank 1, batch 8 per replica (global 16) in 4
// micro-batches (1f1b), 900 training / 100 validation images"
void print_grid(const Job& job, const Session& session) {
  const Layout& l = session.layout();
  const int ranks = job.world.size();
  if (l.tensor > 1)
    std::printf(
        "ranks %d in a grid %d x %d x %d (replicas x stages x tensor-parallel), threads per rank %d, batch %d "
        "per %s (global %d)",
        ranks, l.replicas, l.stages, l.tensor, job.settings.threads, l.batch,
        l.gathers_batch() ? "rank" : "tensor group", l.global_batch());
  else if (l.stages == 1)
    std::printf("ranks %d, threads per rank %d, batch %d per rank (global %d)", ranks, job.settings.threads, l.batch,
                l.global_batch());
  else
    std::printf("ranks %d in a grid %d x %d (replicas x stages), threads per rank %d, batch %d per replica (global %d)",
                ranks, l.replicas, l.stages, job.settings.threads, l.batch, l.global_batch());
  if (l.micro_batches > 1 || l.stages > 1)
    std::printf(" in %d micro-batches (%s)", l.micro_batches, option_word(l.schedule));
  std::printf("%s", l.recompute_note().c_str());
  std::printf(", %zu training / %zu validation images\n", job.settings.train_subset.size(),
              job.settings.val_subset.size());
}

// How the run computes and averages, and where it started from.
void print_run_notes(const Job& job, const Session& session) {
  const TrainOptions& o = job.options;
  const Layout& l = session.layout();
  const ImageDataset& data = session.train_loader->dataset();
  const dims_t& in = session.model->input_shape();
  if (data.encoded())
    std::printf("JPEG files decoded on %d loader threads a rank, %s to %ldx%ld (rank 0: %s)\n",
                job.settings.loader_threads, o.random_resized_crop ? "random-resized-cropped" : "centre-cropped",
                static_cast<long>(in[1]), static_cast<long>(in[2]), job.settings.placement_note.c_str());
  else if (data.height() != in[1] || data.width() != in[2])
    std::printf("%s images resampled to %ldx%ld (bilinear)\n", image_shape(data).c_str(), static_cast<long>(in[1]),
                static_cast<long>(in[2]));
  std::printf("optimizer %s, schedule %s\n", session.optimizer->describe().c_str(),
              session.schedule.describe().c_str());
  if (o.precision == Precision::automatic && session.ctx.compute_type() == dt::f32)
    std::printf("precision auto: f32 (a CPU of this run has neither AVX512-BF16 nor AMX)\n");
  if (session.ctx.compute_type() == dt::bf16)
    std::printf(
        "precision bf16: convolutions, dense layers and matrix products multiply in bf16 and accumulate in "
        "f32; activations bf16 between the layers that take it; weights, gradients, optimizer and loss f32\n");
  // Sharded state goes through the ring's halves whatever --allreduce says; the default (hier) goes unnamed.
  const double bucket_mb = l.reduce_bucket_bytes() / (1 << 20);
  const std::string ring = o.allreduce_algorithm == AllreduceAlgorithm::mpi ? "(ring, f32, not --allreduce mpi)"
                                                                            : "(ring, f32)";
  if (l.shards_parameters())
    std::printf("gradients: reduced to their owners in buckets of %g MB during backward; each layer's parameters "
                "gathered from their owners before it runs %s\n", bucket_mb, ring.c_str());
  else if (l.shards_gradients())
    std::printf("gradients: reduced to their owners in buckets of %g MB during backward; parameters all-gathered "
                "after the update %s\n", bucket_mb, ring.c_str());
  else if (l.shards_optimizer_state())
    std::printf("gradients: reduce-scattered after backward; parameters all-gathered after the update %s\n",
                ring.c_str());
  else if (o.shard_state > 0)
    std::printf("--shard-state %d: nothing to shard, the layout has one replica (%d x %d x %d)\n", o.shard_state,
                l.replicas, l.stages, l.tensor);
  else if (l.replicas > 1 && l.buckets_overlap_backward())
    std::printf("gradients: %s all-reduce, %s wire, buckets of %g MB during backward\n",
                option_word(o.allreduce_algorithm), option_word(o.allreduce_wire), o.bucket_mb);
  else if (l.replicas > 1)
    std::printf("gradients: %s all-reduce, %s wire, one piece after backward\n", option_word(o.allreduce_algorithm),
                option_word(o.allreduce_wire));
  if (o.num_classes > 0 && static_cast<std::size_t>(o.num_classes) > data.num_classes())
    std::printf("note: --num-classes %d, but %s has %zu classes: the model's other outputs are never a right answer\n",
                o.num_classes, o.train_path.c_str(), data.num_classes());
  if (!job.resume_path.empty()) {
    std::printf(
        "resumed from %s after epoch %llu%s%s\n", job.resume_path.c_str(),
        static_cast<unsigned long long>(job.state.epochs_done),
        job.state.steps_done ? (" and " + std::to_string(job.state.steps_done) + " steps of the next").c_str() : "",
        o.checkpoint_dir.empty()
            ? ""
            : ProgressMark::trained_again(o.checkpoint_dir, job.state.epochs_done, job.state.steps_done).c_str());
    const std::string changed = changed_options(job.state.configuration, o.describe(l));
    if (!changed.empty()) std::printf("options changed since the checkpoint: %s\n", changed.c_str());
    if (!o.init.empty()) std::printf("--init %s not used: the run resumed instead\n", o.init.c_str());
  }
  if (!job.init_note.empty()) std::printf("%s\n", job.init_note.c_str());
  if (!job.cache_note.empty()) std::printf("%s\n", job.cache_note.c_str());
}

}  // namespace

void print_header(const Job& job, Session& session) {
  const ChosenLayout& chosen = session.chosen;
  const Layout& l = chosen.layout;
  if (chosen.replan_reason.empty()) std::printf("options: %s\n", job.given_options.c_str());
  if (!chosen.replan_reason.empty())
    std::printf("%s\n", chosen.replan_reason.c_str());
  else if (l.stages == 1)
    std::cout << session.model->summary(session.ctx);
  else
    std::printf("model %s in %d pipeline stages:\n%s", job.options.model.c_str(), l.stages,
                session.partition_report.c_str());
  print_grid(job, session);
  if (!job.settings.nodes.empty()) std::printf("%s\n", job.settings.nodes.c_str());
  if (!chosen.split_report.empty()) std::printf("%s\n", chosen.split_report.c_str());
  if (!chosen.plan_report.empty()) std::printf("%s", chosen.plan_report.c_str());
  if (chosen.replan_reason.empty()) print_run_notes(job, session);
  std::fflush(stdout);
}

void report_epoch(Job& job, const Session& session, const EpochFigures& f) {
  const TrainOptions& o = job.options;
  const Layout& l = session.layout();
  const PassMetrics& tr = f.train;
  const double steps = static_cast<double>(std::max<std::size_t>(tr.steps, 1));
  const double step_seconds = tr.seconds / steps;
  const double predicted = session.chosen.predicted_step_s;
  std::printf("epoch %d/%d  train loss %.4f acc %.4f", f.epoch, o.epochs, tr.loss, tr.accuracy);
  if (f.validated) std::printf("  val loss %.4f acc %.4f", f.val.loss, f.val.accuracy);
  std::printf("  time %.2f s  %.0f img/s  lr %.3g  peak RSS %.0f MB%s", tr.seconds, tr.images_per_second(), f.lr,
              f.peak_mb, job.world.size() > 1 ? " (largest rank)" : "");
  if (l.replicas > 1)
    std::printf("  comm wait %.1f%%  %.2f MB all-reduced/step", 100.0 * f.comm_share,
                f.reduced_bytes / steps / (1 << 20));
  if (l.stages > 1) std::printf("  pipeline wait %.1f%%", 100.0 * f.pipeline_wait_s / tr.seconds);
  std::printf("  data wait %.1f%%", 100.0 * f.data_wait_share);
  if (f.skipped > 0) std::printf("  %.0f corrupt images skipped", f.skipped);
  if (l.tensor > 1) std::printf("  tensor group %.0f bytes/step sent per rank", f.tensor_bytes / steps);
  // Three significant digits: a small model's step of a few milliseconds is compared within 10%.
  if (predicted > 0) std::printf("  step %.3g s (planned %.3g s)", step_seconds, predicted);
  std::printf("\n");
  std::fflush(stdout);
  if (job.metrics)
    job.metrics->write({f.epoch, tr.loss, tr.accuracy, f.val.loss, f.val.accuracy, tr.seconds, tr.images_per_second(),
                        f.lr, f.peak_mb, f.comm_share, f.pipeline_wait_s / tr.seconds, f.data_wait_share, step_seconds,
                        predicted, session.chosen.predicted_comm_share, job.world.size()});
  if (job.tensorboard) {
    std::vector<std::pair<std::string, double>> scalars = {{"epoch/train_loss", tr.loss},
                                                           {"epoch/train_accuracy", tr.accuracy},
                                                           {"epoch/images_per_second", tr.images_per_second()},
                                                           {"epoch/step_seconds", step_seconds},
                                                           {"epoch/learning_rate", f.lr},
                                                           {"epoch/peak_memory_mb", f.peak_mb},
                                                           {"epoch/data_wait_share", f.data_wait_share}};
    if (f.validated) {
      scalars.emplace_back("epoch/val_loss", f.val.loss);
      scalars.emplace_back("epoch/val_accuracy", f.val.accuracy);
    }
    if (l.replicas > 1) scalars.emplace_back("epoch/comm_wait_share", f.comm_share);
    if (l.stages > 1) scalars.emplace_back("epoch/pipeline_wait_share", f.pipeline_wait_s / tr.seconds);
    job.tensorboard->scalars(f.step, scalars);
    job.tensorboard->flush();
  }
}

void print_profile(const Profiler& profiler, double train_seconds, std::size_t steps) {
  std::printf("profile (per training step, %zu steps):\n  %-34s %10s %10s %7s\n", steps, "layer", "fwd ms", "bwd ms",
              "share");
  double layers = 0;
  for (const auto& e : profiler.entries()) layers += e.forward_s + e.backward_s;
  for (const auto& e : profiler.entries())
    std::printf("  %-34s %10.3f %10.3f %6.1f%%\n", e.layer.c_str(), 1e3 * e.forward_s / steps,
                1e3 * e.backward_s / steps, 100.0 * (e.forward_s + e.backward_s) / train_seconds);
  std::printf("  %-34s %21.3f %6.1f%%\n", "other (loss, optimizer, data wait)", 1e3 * (train_seconds - layers) / steps,
              100.0 * (train_seconds - layers) / train_seconds);
}

void write_timeline(const Job& job, const Session& session) {
  const Communicator& world = job.world;
  const GridPosition& p = session.position();
  const std::string label = "rank " + std::to_string(world.rank()) + " (replica " + std::to_string(p.replica) +
                            ", stage " + std::to_string(p.stage) +
                            (session.layout().tensor > 1 ? ", tensor rank " + std::to_string(p.t) : "") + ")";
  const auto texts = world.gather(job.timeline.json_events(world.rank(), label), 0);
  if (world.rank() != 0) return;
  const std::string& path = job.options.timeline_path;
  std::ofstream out(path);
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (std::size_t r = 0; r < texts.size(); ++r) out << (r ? ",\n" : "") << texts[r];
  out << "\n]}\n";
  out.close();
  if (!out) throw Error("cannot write the timeline to " + path);
  std::printf("timeline of %zu ranks in %s%s\n", texts.size(), path.c_str(),
              job.timeline.dropped() ? " (rank 0 kept only its first events)" : "");
}

std::string changed_options(const std::string& before, const std::string& now) {
  const auto was = configuration_values(before), is = configuration_values(now);
  std::string changed;
  for (const auto& [key, value] : is) {
    const auto it = was.find(key);
    if (key == "epochs" || it == was.end() || it->second == value) continue;
    changed += (changed.empty() ? "" : ", ") + key + " " + it->second + " -> " + value;
  }
  return changed;
}

}  // namespace ddl
