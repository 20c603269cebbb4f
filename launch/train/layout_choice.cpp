#include "launch/train/layout_choice.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "launch/plan_profile.hpp"
#include "launch/tensor_split.hpp"
#include "launch/train/on_every_rank.hpp"

namespace ddl {
namespace {

// --load-profile: a profile of this model, saved by --save-profile.
MeasuredProfile load_profile(const TrainOptions& o, const Communicator& world, const Model& model) {
  MeasuredProfile measured;
  on_every_rank(world, "--load-profile", [&] {
    std::ifstream in(o.load_profile);
    if (!in || std::filesystem::is_directory(o.load_profile))
      throw InputError("--load-profile: cannot read " + o.load_profile);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    measured.profile = profile_from_text(text, o.load_profile);
    if (measured.profile.model != o.model)
      throw InputError("--load-profile " + o.load_profile + " profiles model " + measured.profile.model + ", not " +
                       o.model);
    const std::vector<LayerCost>& layers = measured.profile.layers;
    if (layers.size() != model.num_layers())
      throw InputError("--load-profile " + o.load_profile + " holds " + std::to_string(layers.size()) +
                       " layers, model " + o.model + " has " + std::to_string(model.num_layers()));
    // The same model at another size (--width, --depth, --num-classes) has other parameters, and other times;
    // the text keeps 9 digits.
    for (std::size_t i = 0; i < layers.size(); ++i)
      if (const auto count = static_cast<double>(model.layer_param_count(i));
          std::abs(layers[i].params - count) > 1e-8 * count + 0.5)
        throw InputError("--load-profile " + o.load_profile + ": its layer " + std::to_string(i) + " (" +
                         layers[i].name + ") holds " + std::to_string(static_cast<long long>(layers[i].params)) +
                         " parameters, this model's " + std::to_string(model.layer_param_count(i)) +
                         " (profiled with other model options?)");
  });
  measured.report = "  profile and links from " + o.load_profile + "\n";
  return measured;
}

// --strategy auto | data | pipeline: the profile (measured on these ranks, or --load-profile) and the plan,
// which every rank must agree on.
ChosenLayout planner_layout(Job& job) {
  const TrainOptions& o = job.options;
  const Communicator& world = job.world;
  const bool one_node = job.settings.ranks_per_node == world.size();
  const MeasuredProfile measured = o.load_profile.empty()
                                       ? measure_profile(o, job.config, world, job.settings.compute_type, one_node)
                                       : load_profile(o, world, *job.whole);
  on_every_rank(world, "--save-profile", [&] {
    if (o.save_profile.empty() || world.rank() != 0) return;
    std::ofstream out(o.save_profile);
    out << to_text(measured.profile);
    out.close();
    if (!out) throw InputError("--save-profile: cannot write " + o.save_profile);
  });
  const int ranks = o.plan_for_ranks > 0 ? o.plan_for_ranks : world.size();
  const Cluster cluster{ranks,
                        o.plan_for_per_node > 0 ? o.plan_for_per_node : std::min(job.settings.ranks_per_node, ranks),
                        o.allreduce_algorithm == AllreduceAlgorithm::hierarchical};
  const double limit = rank_memory_limit(o, cluster.ranks_per_node, world);
  const PlanReport plan = plan_strategy(o, measured.profile, cluster, limit, job.settings.cache_bytes);
  if (o.plan_only) {
    ChosenLayout report_only;
    report_only.plan_report = plan.text + measured.report;
    return report_only;
  }
  if (o.replan_every != TrainOptions::kNeverReplan && world.size() > 1)
    job.replanner.emplace(o, measured.profile, cluster, limit, job.settings.cache_bytes, plan.chosen.layout,
                          job.faults.measured_link);
  world.check_same(std::string("the plan (the layout chosen by --strategy ") + option_word(o.strategy) + ")",
                   Checksum().add(plan.chosen.layout.describe()).value());
  ChosenLayout chosen = planned_layout(plan, *job.whole);
  chosen.plan_report += measured.report;
  return chosen;
}

}  // namespace

ChosenLayout manual_layout(const TrainOptions& o, Model& whole, int ranks) {
  const int S = o.pipeline_stages, T = o.tensor_parallel;
  if (ranks % (S * T) != 0)
    throw InputError(std::to_string(ranks) + " ranks do not form a grid of replicas x " + std::to_string(S) +
                     " pipeline stages x " + std::to_string(T) +
                     " tensor-parallel ranks (the rank count must be a multiple of --pipeline-stages times "
                     "--tensor-parallel)");
  ChosenLayout chosen;
  Layout& l = chosen.layout;
  l.replicas = ranks / (S * T);
  l.stages = S;
  l.tensor = T;
  l.micro_batches = o.micro_batches;
  l.cut = o.partition;
  l.batch = o.batch_size;
  l.schedule = o.pipeline_schedule;
  l.bucket_bytes = o.bucket_bytes();
  l.shard_state = std::max(0, o.shard_state);  // auto: none
  if (o.recompute) l.recompute.assign(static_cast<std::size_t>(S), 1);
  if (T > 1) {
    TensorSplitChoice split = choose_tensor_split(o.tensor_split, whole, T);
    l.split = std::move(split.layers);
    l.split_kind = split.kind;
    chosen.split_report = std::move(split.report);
  }
  if (o.global_batch > 0) {
    const int share = o.global_batch / l.data_ranks();
    if (share * l.data_ranks() != o.global_batch || share % l.micro_batches != 0)
      throw InputError("--global-batch " + std::to_string(o.global_batch) + " does not divide among " +
                       std::to_string(l.data_ranks()) + " ranks that bring their own images" +
                       (l.micro_batches > 1 ? " in " + std::to_string(l.micro_batches) + " micro-batches each" : ""));
    l.batch = share;
  }
  return chosen;
}

ChosenLayout planned_layout(const PlanReport& plan, Model& whole) {
  ChosenLayout chosen;
  chosen.layout = plan.chosen.layout;
  chosen.plan_report = plan.text;
  chosen.predicted_step_s = plan.chosen.prediction.step_s;
  chosen.predicted_comm_share = plan.chosen.prediction.comm_share();
  const Layout& l = chosen.layout;
  if (l.tensor > 1) chosen.split_report = check_tensor_split(l.split, whole, l.tensor, "the plan's split").report;
  return chosen;
}

ChosenLayout first_layout(Job& job) {
  if (job.options.strategy == Strategy::manual) return manual_layout(job.options, *job.whole, job.world.size());
  return planner_layout(job);
}

}  // namespace ddl
