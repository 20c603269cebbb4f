#include "launch/strategy.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.hpp"

namespace ddl {
namespace {

std::string summary(const char* label, const Plan& plan) {
  const Prediction& p = plan.prediction;
  char line[320];
  std::snprintf(line, sizeof line, "  %-10s %s: step %.3f s, peak %.2f GB, %.2f MB sent per rank, communication %.0f%%\n",
                label, plan.layout.describe().c_str(), p.step_s, p.peak_bytes / 1e9, p.sent_bytes / (1 << 20),
                100 * p.comm_share());
  return line;
}

// Why the chosen layout shards the optimizer's state or recomputes activations: the same layout without.
std::string why_state_choice(const TrainOptions& o, const Profile& profile, const Cluster& cluster, int global_batch,
                             const Plan& chosen, double planned_limit_bytes) {
  Layout plain = chosen.layout;
  plain.shard_state = 0;
  plain.recompute.clear();
  const Prediction without = predict(profile, cluster, plain, global_batch);
  const Prediction& with = chosen.prediction;
  std::string what;
  if (chosen.layout.shards_optimizer_state())
    what = chosen.layout.sharded_state() + " sharded" + (o.shard_state > 0 ? " (asked for)" : "");
  if (chosen.layout.recomputes_any())
    what += (what.empty() ? "" : " and ") + chosen.layout.recompute_note().substr(2) +  // past ", "
            (o.recompute ? " (asked for)" : "");
  char line[400];
  std::snprintf(line, sizeof line, "  %-10s %s: peak %.2f GB, step %.3f s; without: peak %.2f GB, step %.3f s%s\n",
                "why", what.c_str(), with.peak_bytes / 1e9, with.step_s, without.peak_bytes / 1e9, without.step_s,
                planned_limit_bytes > 0 && without.peak_bytes > planned_limit_bytes ? " (over the planned limit)" : "");
  return line;
}

// The cost model's memory error, measured against peak RSS (docs/performance.md, "The planner's memory"):
// up to 35 MB under for small models (the runtime's share) and a few percent for large ones. A plan keeps
// that much under the limit.
constexpr double kMemoryMarginBytes = 48.0 * (1 << 20);
constexpr double kMemoryMarginShare = 0.05;

double planned_limit(double memory_limit_bytes) {
  if (memory_limit_bytes <= 0) return 0;
  // A byte at least: 0 would mean no limit.
  return std::max(1.0, std::min(memory_limit_bytes - kMemoryMarginBytes, memory_limit_bytes / (1 + kMemoryMarginShare)));
}

// Why the search found no layout at all to weigh: the grid the options fix, or else the batch.
std::string why_no_layout(const TrainOptions& o, const Profile& profile, const Cluster& cluster,
                          const Constraints& limits, int global) {
  const std::string head = std::string("--strategy ") + option_word(o.strategy) + ": ";
  const std::string ranks = "the " + std::to_string(cluster.ranks) + " rank" + (cluster.ranks == 1 ? "" : "s") +
                            " planned for";
  const std::size_t layers = profile.layers.size();
  const int tensor = std::max(limits.tensor, 1);
  const std::string stages_named = "--pipeline-stages " + std::to_string(limits.stages);
  const std::string tensor_named = "--tensor-parallel " + std::to_string(tensor);
  if (limits.stages > 0 && cluster.ranks % (limits.stages * tensor) != 0)
    return head + stages_named + (tensor > 1 ? " times " + tensor_named : "") + " does not divide " + ranks;
  if (cluster.ranks % tensor != 0) return head + tensor_named + " does not divide " + ranks;
  if (static_cast<std::size_t>(limits.stages) > layers)
    return head + stages_named + ": the model has " + std::to_string(layers) + " layers to cut";
  bool stages_fit = false;  // a number of stages the search may take: it divides the ranks, and cuts the model
  const int most_stages = std::min(cluster.ranks / tensor, static_cast<int>(layers));
  for (int S = std::max(limits.min_stages, 1); S <= most_stages; ++S)
    stages_fit = stages_fit || (cluster.ranks / tensor % S == 0 && (limits.stages == 0 || limits.stages == S));
  if (!stages_fit)
    return head + "a pipeline of " + std::to_string(limits.min_stages) + " stages or more, one rank each at " +
           "least and at most the model's " + std::to_string(layers) + " layers, does not divide " + ranks;
  Layout grid;
  grid.tensor = tensor;
  const SplittableLayers splittable = splittable_layers(profile, grid);
  if (tensor > 1 && splittable.dense.empty() && splittable.blocks.empty())
    return head + tensor_named + ": no layer of the model splits " + std::to_string(tensor) +
           " ways (a dense layer's outputs, or every block's heads, must divide by it)";
  return head + "no layout of " + ranks + " trains a global batch of " + std::to_string(global) +
         (limits.micro_batches > 0 ? " in " + std::to_string(limits.micro_batches) + " micro-batches" : "") +
         (tensor > 1 ? " with the layers split " + std::to_string(tensor) + " ways" : "");
}

}  // namespace

double memory_limit_bytes(const TrainOptions& options, std::istream& meminfo, int ranks_per_node) {
  if (options.memory_limit_gb > 0) return options.memory_limit_gb * 1e9;
  std::string key;
  double kb = 0;
  while (meminfo >> key >> kb)
    if (key == "MemTotal:") return 0.9 * kb * 1024 / std::max(1, ranks_per_node);
  return 0;
}

double rank_memory_limit(const TrainOptions& options, int ranks_per_node, const Communicator& world) {
  std::ifstream meminfo("/proc/meminfo");
  std::vector<double> limit{memory_limit_bytes(options, meminfo, ranks_per_node)};
  world.allreduce_min(limit);
  return limit[0];
}

std::vector<int> shard_states_to_plan(const TrainOptions& o, bool one_node) {
  if (o.shard_state != TrainOptions::kShardStateAuto) return {o.shard_state};
  // Sharded, every rank writes its shard into the checkpoint: the planner shards on its own only where
  // all ranks share a node, and so the checkpoint folder.
  if (!o.shard_state_refusal().empty() || !one_node) return {0};
  return o.bucket_mb != 0 ? std::vector<int>{0, 2, 3} : std::vector<int>{0, 1, 2, 3};  // 1 takes no buckets
}

bool planner_may_split(const TrainOptions& o) {
  return o.strategy == Strategy::automatic && !o.layerwise_optimizer() && o.fixed_tensor != 1;
}

namespace {

Constraints constraints_of(const TrainOptions& o, const Cluster& cluster, double memory_limit_bytes) {
  Constraints limits;
  limits.memory_limit_bytes = planned_limit(memory_limit_bytes);
  limits.stages = o.fixed_stages;
  limits.tensor = o.fixed_tensor;
  limits.micro_batches = o.fixed_micro_batches;
  limits.schedule = o.pipeline_schedule;
  limits.bucket_bytes = o.bucket_bytes();
  limits.shard_states = shard_states_to_plan(o, cluster.ranks_per_node >= cluster.ranks);
  limits.may_recompute = true;
  limits.must_recompute = o.recompute;
  if (!planner_may_split(o)) limits.tensor = 1;
  if (o.strategy == Strategy::data) limits.stages = 1;
  if (o.strategy == Strategy::pipeline) limits.min_stages = 2;
  return limits;
}

std::string gb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g GB", bytes / 1e9);
  return text;
}

// Where no layout fits the limit: how far off it is, by the leanest layout the search weighed at its planned
// peak, and the least limit whose planned share (planned_limit) would hold it, in GB to 3 digits rounded up.
std::string no_layout_fits(const TrainOptions& o, const Profile& profile, const Cluster& cluster, int global,
                           const Constraints& limits, double given_limit_bytes, double images_bytes) {
  std::optional<Plan> leanest;
  for_each_layout(profile, cluster, global, limits, [&](const Plan& p) {
    if (!leanest || p.prediction.peak_bytes < leanest->prediction.peak_bytes) leanest = p;
  });
  const double peak = leanest->prediction.peak_bytes;
  const double needed_gb = (std::max(peak + kMemoryMarginBytes, peak * (1 + kMemoryMarginShare)) + images_bytes) / 1e9;
  const double digit = std::pow(10.0, std::floor(std::log10(needed_gb)) - 2);
  char needed[32];
  std::snprintf(needed, sizeof needed, "%.3g", std::ceil(needed_gb / digit) * digit);
  return std::string("--strategy ") + option_word(o.strategy) + ": no layout of " + std::to_string(cluster.ranks) +
         (cluster.ranks == 1 ? " rank" : " ranks") + " fits the memory limit of " + gb(given_limit_bytes) +
         " per rank, less " + (images_bytes > 0 ? gb(images_bytes) + " of training images kept in memory and " : "") +
         "the margin for the predicted peaks' error (" +
         std::to_string(static_cast<int>(kMemoryMarginBytes / (1 << 20))) + " MB or " +
         std::to_string(static_cast<int>(std::lround(100 * kMemoryMarginShare))) + "%); the leanest layout, " +
         leanest->layout.describe() + ", is planned to peak at " + gb(peak) + ": it needs --memory-limit " + needed +
         " at least";
}

// The chosen layout, the others' best beside it, and its layers' predictions.
std::string plan_text(const TrainOptions& o, const Profile& profile, const Cluster& cluster, int global,
                      const SearchResult& r, const Constraints& limits, double memory_limit_bytes, double seconds) {
  const Plan& chosen = *r.best;
  std::ostringstream report;
  char line[320];
  std::snprintf(line, sizeof line,
                "plan (--strategy %s, global batch %d on %d ranks, %d a node): %zu layouts in %.3f s, %zu over the "
                "memory limit of %.2f GB per rank (planned to %.2f GB: predicted peaks were measured up to %.0f MB or "
                "%.0f%% under)\n",
                option_word(o.strategy), global, cluster.ranks, cluster.ranks_per_node, r.considered, seconds,
                r.over_memory, memory_limit_bytes / 1e9, limits.memory_limit_bytes / 1e9,
                kMemoryMarginBytes / (1 << 20), 100 * kMemoryMarginShare);
  report << line << summary("chosen", chosen);
  if (chosen.layout.shards_optimizer_state() || chosen.layout.recomputes_any())
    report << why_state_choice(o, profile, cluster, global, chosen, limits.memory_limit_bytes);
  if (r.fastest && r.fastest->layout.describe() != chosen.layout.describe()) report << summary("fastest", *r.fastest);
  if (r.best_data) report << summary("data", *r.best_data);
  if (r.best_pipeline) report << summary("pipeline", *r.best_pipeline);  // of one replica
  std::snprintf(line, sizeof line, "  %-3s %-40s %5s %5s %10s %10s %10s\n", "#", "layer", "stage", "split", "time ms",
                "memory MB", "sent MB");
  report << line;
  const Prediction& p = chosen.prediction;
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    const LayerPrediction& lp = p.layers[i];
    std::snprintf(line, sizeof line, "  %-3zu %-40.40s %5d %5s %10.2f %10.1f %10.2f\n", i, profile.layers[i].name.c_str(),
                  lp.stage, lp.split ? "yes" : "-", 1e3 * lp.seconds, lp.memory_bytes / (1 << 20),
                  lp.sent_bytes / (1 << 20));
    report << line;
  }
  return report.str();
}

}  // namespace

PlanReport plan_strategy(const TrainOptions& o, const Profile& profile, const Cluster& cluster,
                         double given_limit_bytes, double images_bytes) {
  // A limit the images fill leaves a byte, which no layout fits (0 would mean no limit).
  const double memory_limit_bytes = given_limit_bytes > 0 ? std::max(1.0, given_limit_bytes - images_bytes) : 0;
  const Constraints limits = constraints_of(o, cluster, memory_limit_bytes);
  const auto t0 = std::chrono::steady_clock::now();
  const int global = o.global_batch_on(cluster.ranks);
  const SearchResult r = plan_layouts(profile, cluster, global, limits);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.best && r.considered == 0) throw InputError(why_no_layout(o, profile, cluster, limits, global));
  if (!r.best)
    throw InputError(no_layout_fits(o, profile, cluster, global, limits, given_limit_bytes, images_bytes));
  return {*r.best, plan_text(o, profile, cluster, global, r, limits, memory_limit_bytes, seconds)};
}

}  // namespace ddl
