#include "launch/plan_profile.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>

#include "comm/allreduce.hpp"
#include "comm/mpi_replica_group.hpp"
#include "core/optim/optimizer.hpp"
#include "core/plan/search.hpp"
#include "core/profiler.hpp"
#include "core/tensor_group.hpp"
#include "core/train/resources.hpp"
#include "core/train/sharded_parameters.hpp"
#include "launch/strategy.hpp"
#include "launch/tensor_split.hpp"
#include "launch/optimizer_choice.hpp"

namespace ddl {
namespace {

using clock = std::chrono::steady_clock;

double since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

// The sizes a link is timed at: 1 KB, then 8 times as large, up to `largest`, which comes last.
std::vector<std::size_t> probe_sizes(std::size_t largest) {
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = 1024; bytes < largest; bytes *= 8) sizes.push_back(bytes);
  sizes.push_back(std::max<std::size_t>(largest, 1024));
  return sizes;
}
constexpr std::size_t kMostSizes = 12;  // more than probe_sizes makes for the largest probe (at most 7)

// The seconds `transfer(bytes)` takes over `comm` for each of `sizes`: the best of a few, after a warm-up,
// taken in turn so that a burst of other work on the node slows every size alike; the slowest rank's (a
// transfer ends when its slowest rank does), never falling as the size grows.
template <class Transfer>
std::vector<Timing> best_times(const Communicator& comm, const std::vector<std::size_t>& sizes, Transfer transfer) {
  std::vector<double> best(sizes.size(), 1e30);
  for (int rep = 0; rep < 5; ++rep)
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      comm.barrier();
      const auto t0 = clock::now();
      transfer(sizes[i]);
      if (rep > 0) best[i] = std::min(best[i], since(t0));
    }
  comm.allreduce_max(best);
  std::vector<Timing> timings;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    timings.push_back({static_cast<double>(sizes[i]), std::max(best[i], i > 0 ? timings.back().seconds : 0.0)});
  return timings;
}

// The ring steps of the all-reduce training runs (its algorithm and wire: an all-reduce of B bytes over n
// ranks is taken as 2 (n - 1) steps of B / n), up to an all-reduce of `largest` bytes; and messages passed
// to the next rank as pipeline stages pass them, of the same sizes. The line through the smallest and the
// largest ring steps gives the latency and the bandwidth beyond them (two large sizes alone are too close
// for a slope that noise does not swing: VGG16's all-reduce over TCP was planned at a fifth of its time).
Link measure_link(const Communicator& comm, const TrainOptions& o, std::size_t largest) {
  const int n = comm.size();
  const std::vector<std::size_t> sizes = probe_sizes(largest / static_cast<std::size_t>(n));
  Allreducer allreducer(comm, o.allreduce());
  std::vector<float> values(sizes.back() * static_cast<std::size_t>(n) / sizeof(float), 1.0f);
  Link link;
  link.ring_steps = best_times(comm, sizes, [&](std::size_t step) {
    allreducer.run(std::span<float>(values).first(step * static_cast<std::size_t>(n) / sizeof(float)), ReduceOp::sum);
  });
  for (Timing& t : link.ring_steps) t.seconds /= 2.0 * (n - 1);
  std::vector<char> send(sizes.back(), 1), receive(sizes.back());
  link.messages = best_times(comm, sizes, [&](std::size_t bytes) {
    comm.shift(std::span<const char>(send).first(bytes), std::span<char>(receive).first(bytes));
  });
  const Timing &first = link.ring_steps.front(), &last = link.ring_steps.back();
  link.bytes_per_s = last.seconds > first.seconds ? (last.bytes - first.bytes) / (last.seconds - first.seconds)
                                                  : last.bytes / last.seconds;
  link.latency_s = std::max(0.0, first.seconds - first.bytes / link.bytes_per_s);
  return link;
}

// A link's figures in a fixed number of doubles, zero where not measured, to take the slowest rank's of
// each (the ranks that did not measure it add zeros), and back.
void pack(const Link& link, std::vector<double>& to) {
  to.push_back(link.latency_s);
  to.push_back(link.bytes_per_s > 0 && !link.ring_steps.empty() ? 1 / link.bytes_per_s : 0);
  for (const auto* timings : {&link.ring_steps, &link.messages})
    for (std::size_t i = 0; i < kMostSizes; ++i) {
      to.push_back(i < timings->size() ? (*timings)[i].bytes : 0);
      to.push_back(i < timings->size() ? (*timings)[i].seconds : 0);
    }
}
std::optional<Link> unpack(const std::vector<double>& from, std::size_t& at) {
  Link link;
  link.latency_s = from[at++];
  const double seconds_per_byte = from[at++];
  for (auto* timings : {&link.ring_steps, &link.messages})
    for (std::size_t i = 0; i < kMostSizes; ++i, at += 2)
      if (from[at] > 0) timings->push_back({from[at], from[at + 1]});
  if (seconds_per_byte <= 0) return std::nullopt;
  link.bytes_per_s = 1 / seconds_per_byte;
  return link;
}

// Each layer's seconds per call, and every timed step's seconds, one by one.
struct LayerTimes {
  std::vector<double> layers, steps;
};

// Forward and backward of `model` on `batch` images of 0.5, with a small gradient.
class ProbeStep {
 public:
  ProbeStep(Model& model, Context& ctx, dnnl::memory::dim batch)
      : model_(model), ctx_(ctx), input_(plain_desc({batch, model.input_shape()[0], model.input_shape()[1],
                                                     model.input_shape()[2]}),
                                         ctx.engine()) {
    std::fill(input_.data(), input_.data() + input_.elements(), 0.5f);
  }
  void operator()() {
    const Tensor& out = model_.forward(ctx_, input_, Mode::train);
    Tensor diff(out.desc(), ctx_.engine());
    std::fill(diff.data(), diff.data() + diff.bytes() / sizeof(float), 1e-3f);
    model_.backward(ctx_, diff);
  }

 private:
  Model& model_;
  Context& ctx_;
  Tensor input_;
};

// Each layer's seconds per call of `model` at `batch` images: a warm-up step, then the mean of the steps timed,
// at least two and as many as fill kProbeSeconds: a small model's step of a few milliseconds moves by 10-20%
// from one step to the next on a shared core.
LayerTimes time_layers(Model& model, Context& ctx, dnnl::memory::dim batch) {
  ProbeStep step(model, ctx, batch);
  step();  // the warm-up: it builds the primitives
  Profiler profiler;
  model.attach_profiler(&profiler);
  constexpr std::size_t kLeastTimed = 2, kMostTimed = 64;
  constexpr double kProbeSeconds = 0.3;
  LayerTimes times;
  for (const auto began = clock::now();
       times.steps.size() < kLeastTimed || (times.steps.size() < kMostTimed && since(began) < kProbeSeconds);) {
    const auto t0 = clock::now();
    step();
    times.steps.push_back(since(t0));
  }
  model.attach_profiler(nullptr);
  for (const auto& e : profiler.entries())
    times.layers.push_back((e.forward_s + e.backward_s) / static_cast<double>(times.steps.size()));
  return times;
}

// ZeRO's stage 3 as training meets it, against stage 2: steps of `model` whose gradients go to their owners
// in buckets during backward (an MpiReplicaGroup over every rank of `world`), in turn with steps whose layers
// also gather their parameters before they run (ShardedParameters, a layer ahead), so that the machine's drift
// slows both alike. The gathers share the bucket thread's queue with the gradients, as they do in training.
// Returns the seconds a step the gathers added, the slowest rank's mean. `step_s`: a plain step's, for how
// many pairs fill some 1 s (two at least: one pair of vgg16_cifar's 0.3 s steps said 112 ms once and 193 the
// next). Collective over `world`.
struct GatherTiming {
  double added_s = 0;
  int pairs = 0;
};
GatherTiming time_parameter_gathers(Model& model, Context& ctx, dnnl::memory::dim batch, const TrainOptions& o,
                                    const Communicator& world, double step_s) {
  Layout third;
  third.replicas = world.size();
  third.shard_state = 3;
  third.bucket_bytes = o.bucket_bytes();
  MpiReplicaGroup group(world, o.allreduce(),
                        {.bytes = static_cast<std::size_t>(third.reduce_bucket_bytes()), .to_owners = true,
                         .on_backward_thread = false, .shard_parameters = true});
  const std::span<float> params = model.params(), grads = model.grads();
  ShardedParameters sharded(group, params, *group.parameter_shard(params.size()), true);
  // The model's hooks reach the group and the shard: gone with them, however the probe ends.
  struct Hooks {
    Model& model;
    ~Hooks() {
      model.on_gradients_ready = nullptr;
      model.before_layer = nullptr;
      model.after_layer = nullptr;
    }
  } hooks{model};
  ProbeStep step(model, ctx, batch);
  step();  // set up at this batch again (the probe ran others since), untimed, its gradients kept
  model.on_gradients_ready = [&](std::size_t offset, std::size_t count) {
    group.gradients_ready(grads, offset, count);
  };
  std::vector<double> slowest{step_s};
  world.allreduce_max(slowest);  // every rank runs as many gathers
  GatherTiming timing;
  timing.pairs = std::clamp(static_cast<int>(0.5 / slowest[0]), 2, 16);
  // Each step starts together, so that its collectives do not wait for a rank still in the step before.
  const auto timed = [&](bool gathering) {
    if (gathering) {
      sharded.begin_step();  // gives back what is not this rank's, as a stage-3 run's first step does
      model.before_layer = [&](ParamRange now, ParamRange next) { sharded.before_layer(now, next); };
      model.after_layer = [&](ParamRange now) { sharded.after_layer(now); };
    }
    world.barrier();
    const auto t0 = clock::now();
    step();
    group.reduce_scatter(grads);
    const double seconds = since(t0);
    if (gathering) {
      model.before_layer = nullptr;
      model.after_layer = nullptr;
      sharded.make_whole();
    }
    return seconds;
  };
  std::vector<double> added;  // this rank's: each pair's step of stage 3 less its step of stage 2
  // A pair first to warm the buckets and gathers up where steps are short enough to afford it (under a
  // second); the pairs in either order, so that neither stage always follows the other.
  for (int k = slowest[0] < 1 ? 0 : 1; k <= timing.pairs; ++k) {
    const bool third_first = k % 2 == 1;
    const double first = timed(third_first), second = timed(!third_first);
    if (k > 0) added.push_back(third_first ? first - second : second - first);
  }
  // The median pair: one step the system delayed (ViT-tiny's are 10 ms) would move a mean by more than the
  // gathers cost. A step ends with its slowest rank: the largest rank's median.
  std::sort(added.begin(), added.end());
  const std::size_t half = added.size() / 2;
  std::vector<double> median{added.size() % 2 ? added[half] : (added[half - 1] + added[half]) / 2};
  world.allreduce_max(median);
  timing.added_s = median[0];
  return timing;
}

// Each stage-3 layer gather's seconds beyond the ring steps `link` gives it on `world_size` ranks, from a
// step's `added` seconds; and the plan's line that says so.
std::string measure_gather_extra(Profile& p, const GatherTiming& added, const Link& link, int world_size) {
  double ring = 0, gathered = 0;  // as the cost model counts them: each layer's, in forward and in backward
  for (const LayerCost& l : p.layers)
    if (l.params > 0) {
      ring += 2 * layer_gather_s(link, world_size, l.params);
      ++gathered;
    }
  if (gathered == 0) return "";
  p.gather_extra_s = std::max(0.0, (added.added_s - ring) / (2 * gathered));
  char line[240];
  std::snprintf(line, sizeof line,
                "  stage 3's layer gathers, %d steps beside as many of stage 2: %+.2f ms a step for %.0f layers, "
                "whose ring steps take %.2f ms: %.0f us a gather beyond them\n",
                added.pairs, 1e3 * added.added_s, gathered, 1e3 * ring, 1e6 * p.gather_extra_s);
  return line;
}

// "  how sure: the probe's steps at batch 16 took 0.0112-0.0143 s (10th to 90th percentile, every rank's),
// -9% to +16% of their mean\n": how far one step of the layers the plan times moved while it was measured.
std::string step_spread_report(std::vector<double> steps, int batch, const Communicator& world) {
  std::sort(steps.begin(), steps.end());
  const auto percentile = [&](double q) { return steps[static_cast<std::size_t>(std::lround(q * (steps.size() - 1)))]; };
  std::vector<double> sum{std::accumulate(steps.begin(), steps.end(), 0.0), static_cast<double>(steps.size())};
  std::vector<double> low{percentile(0.1)}, high{percentile(0.9)};
  world.allreduce_sum(sum);
  world.allreduce_min(low);
  world.allreduce_max(high);
  const double mean = sum[0] / sum[1];
  char line[200];
  std::snprintf(line, sizeof line,
                "  how sure: the probe's steps at batch %d took %.3g-%.3g s (10th to 90th percentile, every "
                "rank's), %+.0f%% to %+.0f%% of their mean\n",
                batch, low[0], high[0], 100 * (low[0] / mean - 1), 100 * (high[0] / mean - 1));
  return line;
}

// A tensor group of two that moves nothing: this rank's piece stands where the other's would arrive, and
// sums stay partial. With it the probe times a split layer's own work; the cost model adds its collectives
// from the links' figures.
class TimingGroup : public TensorGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void all_gather(std::span<const float> mine, std::span<float> all) override { repeat(mine, all); }
  void all_gather(std::span<const std::int32_t> mine, std::span<std::int32_t> all) override { repeat(mine, all); }
  void reduce_scatter_sum(std::span<const float> all, std::span<float> mine) override {
    std::copy_n(all.begin(), mine.size(), mine.begin());
  }
  void all_reduce_sum(std::span<float>) override {}
  double take_bytes_sent() override { return 0; }

 private:
  template <class T>
  static void repeat(std::span<const T> mine, std::span<T> all) {
    for (std::size_t at = 0; at + mine.size() <= all.size(); at += mine.size())
      std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(at));
  }
};

// The layers the planner may split that two ranks divide: every transformer block, or else every dense layer.
std::vector<std::size_t> split_in_two(const Profile& p) {
  Layout pairs;
  pairs.tensor = 2;
  SplittableLayers s = splittable_layers(p, pairs);
  return s.blocks.empty() ? s.dense : s.blocks;
}

// Each layer of `splits` timed split two ways (TimingGroup) at the batch, as its whole_share, from the whole
// model's `at_batch`. The layers that run alike in both models (before the first split dense layer, whose
// gathering doubles the rows after it; every one beside split blocks) tell how much faster or slower the
// machine ran the second time: where they hold a tenth of the step, the split times are taken at the first
// run's pace (on this shared machine a 10% drift moved a share by 11 points).
void measure_whole_shares(Profile& p, const std::vector<std::size_t>& splits, const std::vector<double>& at_batch,
                          const TrainOptions& o, const ModelConfig& config, Context& ctx) {
  TimingGroup group;
  auto model = make_model(o.model, config, ctx, {}, nullptr, {splits, &group});
  model->initialize(o.seed);
  const auto b = static_cast<dnnl::memory::dim>(o.batch_size);
  const std::vector<double> split_at_batch = time_layers(*model, ctx, b).layers;
  const std::size_t gather = p.layers[splits.front()].split == SplitKind::dense ? splits.front() : p.layers.size();
  double alike_then = 0, alike_now = 0, total = 0;
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    total += at_batch[i];
    if (i < gather && std::find(splits.begin(), splits.end(), i) == splits.end()) {
      alike_then += at_batch[i];
      alike_now += split_at_batch[i];
    }
  }
  const double pace = alike_then >= 0.1 * total && alike_now > 0 ? alike_now / alike_then : 1.0;
  for (const std::size_t i : splits)
    p.layers[i].whole_share = whole_share_of(p.layers[i], static_cast<double>(i >= gather ? 2 * b : b),
                                             split_at_batch[i] / pace);
}

// "  the layers that split, 1 to 4 (4), timed split in two: 12-17% of their time stays whole on every rank\n",
// or nothing.
std::string split_report(const Profile& p, const std::vector<std::size_t>& splits) {
  if (splits.empty()) return "";
  double least = 1, most = 0;
  for (const std::size_t i : splits) {
    least = std::min(least, p.layers[i].whole_share);
    most = std::max(most, p.layers[i].whole_share);
  }
  const auto percent = [](double share) { return std::to_string(static_cast<int>(std::lround(100 * share))); };
  const std::string which = splits.size() == 1 ? "the layer that splits, " + std::to_string(splits[0]) + ", "
                                               : "the layers that split, " + std::to_string(splits.front()) + " to " +
                                                     std::to_string(splits.back()) + " (" +
                                                     std::to_string(splits.size()) + "), ";
  const std::string shares = percent(least) == percent(most) ? percent(most) : percent(least) + "-" + percent(most);
  return "  " + which + "timed split in two: " + shares + "% of " + (splits.size() == 1 ? "its" : "their") +
         " time stays whole on every rank\n";
}

}  // namespace

MeasuredLinks measure_links(const TrainOptions& o, const Communicator& world, std::size_t probe_bytes) {
  // Within the largest node, and between one rank of each node.
  const Communicator node = world.split_shared();
  const Communicator leaders = world.split(node.rank() == 0 ? 0 : 1, world.rank());
  std::vector<double> node_sizes(1, static_cast<double>(node.size()));
  world.allreduce_max(node_sizes);
  const bool several_nodes = node_sizes[0] < world.size();  // nodes part the ranks: one holds all, or none
  // Each link's figures, the slowest rank's; zeros where not measured.
  Link within, between;
  if (node.size() > 1 && node.size() == static_cast<int>(node_sizes[0])) within = measure_link(node, o, probe_bytes);
  if (several_nodes && node.rank() == 0 && leaders.size() > 1) between = measure_link(leaders, o, probe_bytes);
  std::vector<double> figures;
  pack(within, figures);
  pack(between, figures);
  world.allreduce_max(figures);
  std::size_t at = 0;
  const std::optional<Link> within_measured = unpack(figures, at), between_measured = unpack(figures, at);
  MeasuredLinks m{within_measured.value_or(o.link_within), between_measured.value_or(o.link_between), {},
                  within_measured.has_value(), between_measured.has_value()};
  m.text = "links: within a node " + m.within.describe() + (within_measured ? " (measured)" : " (--link-within)") +
           ", between nodes " + m.between.describe() + (between_measured ? " (measured)" : " (--link-between)");
  return m;
}

namespace {

// Every rank's figures, averaged, so that the ranks plan alike; the layers at the slowest rank's pace, since
// a step ends when its slowest rank's does (two ranks timed ViT-tiny's layers at 13 and 20 ms and trained at
// 20: docs/performance.md). The optimizer's time, from one call, stays the ranks' mean.
void average_over_ranks(Profile& p, const Communicator& world) {
  std::vector<double> slowest{layers_seconds(p)};
  world.allreduce_max(slowest);
  std::vector<double> figures{p.base_bytes, p.optimizer_s_per_param, p.measured_bytes};
  for (const auto& l : p.layers) {
    for (const auto figure : kLayerTimes) figures.push_back(l.*figure);
    figures.push_back(l.whole_share);
  }
  world.allreduce_sum(figures);  // averaged below
  for (double& f : figures) f /= world.size();
  p.base_bytes = figures[0];
  p.optimizer_s_per_param = figures[1];
  p.measured_bytes = figures[2];
  std::size_t at = 3;
  for (LayerCost& l : p.layers) {
    for (const auto figure : kLayerTimes) l.*figure = figures[at++];
    l.whole_share = std::clamp(figures[at++], 0.0, 1.0);  // the mean of the ranks' unclamped figures
  }
  p = at_pace(p, slowest[0]);
}

// The optimizer's state per parameter and its step's time per parameter. The state stays allocated with the
// optimizer returned: the memory formula counts it, so the peak measured next holds it.
std::unique_ptr<Optimizer> measure_optimizer(Profile& p, const TrainOptions& o, Model& probe) {
  const std::size_t n = probe.param_count();
  auto optimizer = make_optimizer(o, probe);
  std::size_t state_floats = 0;
  for (const auto& s : optimizer->state()) state_floats += s.floats.size();
  p.optimizer_floats = static_cast<double>(state_floats) / static_cast<double>(std::max<std::size_t>(1, n));
  optimizer->step(probe.params(), probe.grads(), 0.0f);
  const auto t0 = clock::now();
  optimizer->step(probe.params(), probe.grads(), 0.0f);
  p.optimizer_s_per_param = since(t0) / static_cast<double>(n);
  return optimizer;
}

// Each layer's cost from its calls at the batch (`at_batch`), at a quarter of it and at one image: a call's
// time = fixed + images x per image, fitted through the first two.
std::vector<LayerCost> layer_costs(Model& probe, Context& ctx, const TrainOptions& o,
                                   const std::vector<double>& at_batch, const std::vector<double>& output_bytes) {
  const auto b = static_cast<dnnl::memory::dim>(o.batch_size);
  const dnnl::memory::dim quarter = std::max<dnnl::memory::dim>(1, b / 4);
  const std::vector<double> at_quarter = quarter < b ? time_layers(probe, ctx, quarter).layers : at_batch;
  // And one image, which micro-batches may hold, where the line would reach it from the quarter.
  const std::vector<double> at_one = quarter > 1 ? time_layers(probe, ctx, 1).layers : std::vector<double>{};
  const dims_t& in = probe.input_shape();
  double input_bytes = 4.0 * static_cast<double>(in[0] * in[1] * in[2]);
  std::vector<LayerCost> layers;
  const std::vector<bool> kept = probe.kept_with_previous(probe.num_layers());
  for (std::size_t i = 0; i < probe.num_layers(); ++i) {
    LayerCost l;
    l.kept_with_previous = kept[i] ? 1 : 0;
    l.side_bytes = probe.side_bytes_after(i);
    l.name = probe.layer(i).describe();
    l.seconds = quarter < b ? std::max(0.0, (at_batch[i] - at_quarter[i]) / static_cast<double>(b - quarter))
                            : at_batch[i] / static_cast<double>(b);
    l.fixed_seconds = std::max(0.0, at_batch[i] - static_cast<double>(b) * l.seconds);
    // Never above a call of more images (a layer of a few microseconds, timed with noise), nor under the
    // quarter's time per image: one image uses a core no better (ViT-tiny's attention: 0.30 ms, 0.23 an
    // image at 4). Timed under load, seed_cnn's came out so low that 16 one-image micro-batches were
    // planned faster than one of 16 images.
    if (!at_one.empty()) {
      const double at_quarter_call = l.call_seconds(static_cast<double>(quarter), o.batch_size);
      l.one_image_seconds = std::clamp(at_one[i], at_quarter_call / static_cast<double>(quarter), at_quarter_call);
    }
    l.params = static_cast<double>(probe.layer_param_count(i));
    l.input_bytes = input_bytes;
    l.output_bytes = output_bytes[i];
    l.split = split_kind(probe, i, l.divisor);
    input_bytes = l.output_bytes;
    layers.push_back(l);
  }
  return layers;
}

}  // namespace

MeasuredProfile measure_profile(const TrainOptions& o, const ModelConfig& config, const Communicator& world,
                                dnnl::memory::data_type compute_type, bool one_node) {
  MeasuredProfile measured;
  Profile& p = measured.profile;
  p.model = o.model;
  p.batch = o.batch_size;
  p.base_bytes = static_cast<double>(resident_bytes());
  std::vector<std::size_t> splits;  // the layers timed split, if any
  std::vector<double> steps_at_batch;  // the whole model's, one by one
  // Stage 3's gathers, timed as data parallelism over every rank, where the planner may choose stage 3.
  const std::vector<int> shard_states = shard_states_to_plan(o, one_node);
  const bool gathers_may_run =
      world.size() > 1 && std::find(shard_states.begin(), shard_states.end(), 3) != shard_states.end();
  GatherTiming gather_timing;
  {
    // A context of its own, whose pooled buffers go with the probe.
    Context ctx;
    ctx.set_compute_type(compute_type);
    auto probe = make_model(o.model, config, ctx);
    probe->initialize(o.seed);
    const auto b = static_cast<dnnl::memory::dim>(o.batch_size);
    const LayerTimes batch_times = time_layers(*probe, ctx, b);
    const std::vector<double>& at_batch = batch_times.layers;
    steps_at_batch = batch_times.steps;
    std::vector<double> output_bytes;
    for (const auto& md : probe->output_descs())
      // In f32 whatever the precision: the messages between stages and the split layers' collectives
      // carry f32 (bf16 activations stay inside a stage); for memory in bf16 an overestimate.
      output_bytes.push_back(4.0 * static_cast<double>(product(dims_of(md))) / static_cast<double>(b));
    auto optimizer = measure_optimizer(p, o, *probe);
    p.measured_bytes = static_cast<double>(peak_resident_bytes()) - p.base_bytes;
    p.layers = layer_costs(*probe, ctx, o, at_batch, output_bytes);
    // The planner's split layers timed split, after the whole model is given back, where tensor groups may
    // form.
    if (planner_may_split(o) && std::max(world.size(), o.plan_for_ranks) > 1) splits = split_in_two(p);
    if (!splits.empty()) {
      optimizer.reset();
      probe.reset();
      measure_whole_shares(p, splits, at_batch, o, config, ctx);
    }
    // Stage 3's gathers last, so that the whole model's timings and the split one's stay side by side.
    if (gathers_may_run) {
      if (!probe) {
        probe = make_model(o.model, config, ctx);
        probe->initialize(o.seed);
      }
      gather_timing = time_parameter_gathers(*probe, ctx, b, o, world,
                                             std::accumulate(steps_at_batch.begin(), steps_at_batch.end(), 0.0) /
                                                 static_cast<double>(steps_at_batch.size()));
    }
  }
  average_over_ranks(p, world);
  // The all-reduce of the model's gradients itself where it is not too large to time a few times.
  double params = 0;
  for (const LayerCost& l : p.layers) params += l.params;
  const auto gradient_bytes = static_cast<std::size_t>(4 * params);
  const MeasuredLinks links =
      measure_links(o, world, std::clamp(gradient_bytes, kProbeBytesWhileTraining, kLargestProbeBytes));
  p.within_node = links.within;
  p.between_nodes = links.between;
  const std::string gathers =
      gathers_may_run ? measure_gather_extra(p, gather_timing, one_node ? p.within_node : p.between_nodes, world.size())
                      : "";
  measured.report = "  " + links.text + "\n" + split_report(p, splits) + gathers +
                    step_spread_report(steps_at_batch, o.batch_size, world);
  // The probes' memory is freed: the peaks reported during training leave it out.
  restart_peak_resident();
  return measured;
}

}  // namespace ddl
