#include "core/plan/search.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.hpp"
#include "core/plan/balanced_partition.hpp"

namespace ddl {
namespace {

constexpr std::size_t kMostCuts = 4096;   // beyond: the balanced cut only
constexpr std::size_t kMostSubsets = 64;  // of splittable dense layers; beyond: the last k of them

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

// Which layers no stage may start at (LayerCost::kept_with_previous).
std::vector<bool> kept_with_previous(const Profile& profile) {
  std::vector<bool> kept;
  for (const auto& l : profile.layers) kept.push_back(l.kept_with_previous > 0);
  return kept;
}

// Every way of cutting n layers into s non-empty runs, in order, no run starting at a `kept` layer, or none
// when there are more than `most`.
std::vector<std::vector<std::size_t>> every_cut(std::size_t n, std::size_t s, std::size_t most,
                                                const std::vector<bool>& kept) {
  std::vector<std::vector<std::size_t>> cuts;
  std::vector<std::size_t> counts;
  bool too_many = false;
  std::function<void(std::size_t, std::size_t)> place = [&](std::size_t left, std::size_t stages) {
    if (too_many) return;
    if (stages == 1) {
      counts.push_back(left);
      cuts.push_back(counts);
      counts.pop_back();
      too_many = cuts.size() > most;
      return;
    }
    for (std::size_t k = 1; k + stages - 1 <= left; ++k) {
      if (kept[n - left + k]) continue;
      counts.push_back(k);
      place(left - k, stages - 1);
      counts.pop_back();
    }
  };
  if (s >= 1 && s <= n) place(n, s);
  if (too_many) cuts.clear();
  return cuts;
}

}  // namespace

SplittableLayers splittable_layers(const Profile& profile, const Layout& grid) {
  SplittableLayers s;
  bool all_blocks = true;
  for (std::size_t i = 0; i < profile.layers.size(); ++i) {
    const LayerCost& l = profile.layers[i];
    const bool divides = grid.may_split(l.split, l.divisor);
    if (l.split == SplitKind::dense && divides) s.dense.push_back(i);
    if (l.split == SplitKind::block) {
      s.blocks.push_back(i);
      all_blocks = all_blocks && divides;
    }
  }
  if (!all_blocks) s.blocks.clear();
  return s;
}

namespace {

// The splits a group of T ranks may take: subsets of the dense layers it divides (all of them, or the
// last k when there are many), and all transformer blocks when T divides every one.
std::vector<std::vector<std::size_t>> every_split(const Profile& profile, const Layout& grid) {
  const auto [dense, blocks] = splittable_layers(profile, grid);
  std::vector<std::vector<std::size_t>> splits;
  if ((std::size_t{1} << std::min<std::size_t>(dense.size(), 63)) <= kMostSubsets) {
    for (std::size_t mask = 1; mask < (std::size_t{1} << dense.size()); ++mask) {
      std::vector<std::size_t> s;
      for (std::size_t k = 0; k < dense.size(); ++k)
        if (mask & (std::size_t{1} << k)) s.push_back(dense[k]);
      splits.push_back(s);
    }
  } else {
    for (std::size_t k = 0; k < dense.size(); ++k) splits.emplace_back(dense.begin() + static_cast<std::ptrdiff_t>(k), dense.end());
  }
  if (!blocks.empty()) splits.push_back(blocks);
  return splits;
}

// Each layer's time and memory under a layout without a cut: what the balanced cut weighs.
std::vector<std::size_t> balanced_cut(const Profile& profile, int stages, const std::vector<bool>& kept) {
  std::vector<double> time, memory;
  for (const auto& l : profile.layers) {
    time.push_back(l.seconds);
    memory.push_back(16.0 * l.params + l.output_bytes);
  }
  return balanced_partition(time, memory, stages, kept);
}

bool fits(const Constraints& c, int D, int S, int T, int M) {
  return S >= c.min_stages && (c.replicas == 0 || c.replicas == D) && (c.stages == 0 || c.stages == S) && (c.tensor == 0 || c.tensor == T) &&
         (c.micro_batches == 0 || c.micro_batches == M);
}

// A layout with each sharding and recomputation the limits allow it. A layout that cannot shard (one
// replica) or recompute (split layers) is weighed without, even where the limits ask.
void visit_state_choices(const Profile& profile, const Cluster& cluster, int global_batch, const Constraints& limits,
                         Layout layout, const std::function<void(const Plan&)>& visit) {
  const std::size_t S = static_cast<std::size_t>(layout.stages);
  const bool can_recompute = layout.tensor == 1 && (limits.may_recompute || limits.must_recompute);
  const bool can_shard = layout.replicas > 1;
  for (const int shard : can_shard ? limits.shard_states : std::vector<int>{0}) {
    layout.shard_state = shard;
    if (!limits.must_recompute || !can_recompute) {
      layout.recompute.clear();
      const Plan kept{layout, predict(profile, cluster, layout, global_batch)};
      visit(kept);
      // Recomputing only where the activations kept would not fit: the stages with more in flight.
      std::vector<char> over(S, 0);
      for (std::size_t s = 0; s < S; ++s)
        over[s] = limits.memory_limit_bytes > 0 && kept.prediction.stage_peak_bytes[s] > limits.memory_limit_bytes;
      const auto count = std::count(over.begin(), over.end(), 1);
      if (can_recompute && count > 0 && count < static_cast<std::ptrdiff_t>(S)) {
        layout.recompute = over;
        visit({layout, predict(profile, cluster, layout, global_batch)});
      }
    }
    if (can_recompute) {
      layout.recompute.assign(S, 1);
      visit({layout, predict(profile, cluster, layout, global_batch)});
    }
  }
}

// The step time a choice is weighed by: a layout that is not plain data parallelism, each stage of sharding
// and recomputation each weigh kDataParallelMargin more than their predicted time, unless the limits ask
// for sharding or recomputation.
double weighed_step(const Plan& plan, const Constraints& limits) {
  const Layout& l = plan.layout;
  const int least = *std::min_element(limits.shard_states.begin(), limits.shard_states.end());
  double weight = 1;
  if (!l.plain_data_parallel()) weight *= 1 + kDataParallelMargin;
  // Each of ZeRO's stages beyond the least the limits allow.
  if (l.shards_optimizer_state()) weight *= std::pow(1 + kDataParallelMargin, std::max(0, l.shard_state - least));
  if (l.recomputes_any() && !limits.must_recompute) weight *= 1 + kDataParallelMargin;
  return weight * plan.prediction.step_s;
}

}  // namespace

void for_each_layout(const Profile& profile, const Cluster& cluster, int global_batch, const Constraints& limits,
                     const std::function<void(const Plan&)>& visit) {
  const std::size_t L = profile.layers.size();
  const std::vector<bool> kept = kept_with_previous(profile);
  const std::vector<int> micro_batches =
      limits.micro_batches > 0 ? std::vector<int>{limits.micro_batches} : std::vector<int>{1, 2, 4, 8, 16, 32};
  for (const int T : divisors(cluster.ranks)) {
    std::vector<std::vector<std::size_t>> splits{{}};
    Layout group;
    group.tensor = T;
    if (T > 1) splits = every_split(profile, group);
    if (splits.empty()) continue;
    for (const int S : divisors(cluster.ranks / T)) {
      if (static_cast<std::size_t>(S) > L) continue;
      const int D = cluster.ranks / (T * S);
      auto cuts = every_cut(L, static_cast<std::size_t>(S), kMostCuts, kept);
      if (cuts.empty()) {
        try {
          cuts.push_back(balanced_cut(profile, S, kept));
        } catch (const InputError&) {
          continue;  // too few places to cut into S stages
        }
      }
      for (const auto& split : splits) {
        Layout layout = group;
        layout.replicas = D;
        layout.stages = S;
        layout.split = split;
        layout.split_kind = split.empty() ? SplitKind::none : profile.layers[split.front()].split;
        layout.schedule = limits.schedule;
        layout.bucket_bytes = limits.bucket_bytes;
        if (global_batch % layout.data_ranks() != 0) continue;
        layout.batch = global_batch / layout.data_ranks();
        for (const int M : micro_batches) {
          if (layout.batch % M != 0 || !fits(limits, D, S, T, M)) continue;
          layout.micro_batches = M;
          for (const auto& cut : cuts) {
            layout.cut = cut;
            visit_state_choices(profile, cluster, global_batch, limits, layout, visit);
          }
        }
      }
    }
  }
}

SearchResult plan_layouts(const Profile& profile, const Cluster& cluster, int global_batch, const Constraints& limits) {
  SearchResult result;
  auto better = [](const std::optional<Plan>& held, const Plan& p) {
    return !held || p.prediction.step_s < held->prediction.step_s;
  };
  for_each_layout(profile, cluster, global_batch, limits, [&](const Plan& p) {
    ++result.considered;
    if (limits.memory_limit_bytes > 0 && p.prediction.peak_bytes > limits.memory_limit_bytes) {
      ++result.over_memory;
      return;
    }
    const Layout& l = p.layout;
    if (better(result.fastest, p)) result.fastest = p;
    if (l.plain_data_parallel() && better(result.best_data, p)) result.best_data = p;
    if (l.replicas == 1 && l.tensor == 1 && l.stages > 1 && better(result.best_pipeline, p)) result.best_pipeline = p;
    if (!result.best || weighed_step(p, limits) < weighed_step(*result.best, limits)) result.best = p;
  });
  return result;
}

}  // namespace ddl
