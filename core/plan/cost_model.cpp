#include "core/plan/cost_model.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/plan/pipeline_timing.hpp"
#include "core/recompute_segments.hpp"

namespace ddl {

namespace {

// Ring collectives over n ranks: seconds, and the bytes each rank sends. An all-reduce of B bytes is
// 2 (n - 1) ring steps of B / n each; an all-gather of n pieces (or a reduce-scatter into them) n - 1.
// Nothing to send costs nothing: training skips an empty all-reduce.
double all_reduce_s(const Link& link, int n, double bytes) {
  return n <= 1 || bytes <= 0 ? 0.0 : 2.0 * (n - 1) * link.ring_step_s(bytes / n);
}
double all_reduce_sent(int n, double bytes) { return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * bytes; }
double gather_s(const Link& link, int n, double piece) {
  return n <= 1 || piece <= 0 ? 0.0 : (n - 1) * link.ring_step_s(piece);
}

}  // namespace

double layer_gather_s(const Link& link, int replicas, double params) {
  return all_reduce_s(link, replicas, 4 * params) / 2;
}

namespace {

// Whether every group of `count` consecutive blocks of `block` ranks (aligned on its own size) lies on
// one node of `per_node` consecutive ranks.
bool within_a_node(int block, int count, int per_node) {
  const int span = block * count;
  return span <= per_node && per_node % span == 0;
}

// The floats a rank holds for the gradient all-reduce, per parameter it reduces over D replicas, L of them
// on its node; fitted to VGG16-CIFAR's peak RSS over one rank's on 2 and 4 ranks (docs/performance.md,
// "The planner's memory"): a ring keeps a piece of 1/D and a little more (0.54 and 0.36 floats measured);
// shared-memory windows hold each rank's gradients and the node's sums (2 floats), and a rank touches the
// others' slices it sums (2.4 and 2.7 measured).
double reduce_buffer_floats(bool node_windows, int D, int L) {
  if (D <= 1) return 0;
  if (node_windows && L > 1) return 2.0 + 0.8 * (L - 1) / L;
  return 1.0 / D + 0.1;
}

// Forward's share of a layer's forward and backward time.
constexpr double kForwardShare = 1.0 / 3.0;

// Which of a stage's layers [first, end) keep their outputs for backward when its activations are
// recomputed (Model::recompute_activations, by recompute_segments): the last segment's layers and each
// segment's last layer, whose output is the next segment's kept input; the others' outputs live again
// only while their segment's backward runs. Empty (the default): every layer keeps its output.
struct Recomputation {
  std::size_t first = 0;
  std::vector<std::size_t> segment_of;  // of layers first, first + 1, ...
  bool again(std::size_t i) const { return !segment_of.empty() && segment_of[i - first] != segment_of.back(); }
  bool keeps(std::size_t i) const {
    const std::size_t k = i - first;
    return segment_of.empty() || segment_of[k] == segment_of.back() || segment_of[k] != segment_of[k + 1];
  }
};

Recomputation recomputation_of(const Profile& profile, std::size_t first, std::size_t end) {
  std::vector<double> output_bytes;
  for (std::size_t i = first; i < end; ++i) output_bytes.push_back(profile.layers[i].output_bytes);
  return {first, recompute_segments(output_bytes)};
}

// One micro-batch's activations on a stage, from its input's and each layer's output bytes: what its
// forward keeps for backward, and the most alive during its backward. Layer i's backward holds what is
// kept of the layers up to it, the gradient of its output and that of its input; a recomputed segment's
// outputs are alive again up to i, with only the inputs kept of the segments before it (a later segment's
// input copy is given back after that segment's backward).
struct Activations {
  double kept = 0, backward = 0;
};

Activations activations_of(double input, const std::vector<double>& out, const Recomputation& r) {
  const std::size_t n = out.size();
  Activations a;
  a.kept = input;
  for (std::size_t k = 0; k < n; ++k)
    if (r.keeps(r.first + k)) a.kept += out[k];
  double inputs_kept = input, segment = 0;  // the current segment's kept inputs, and its outputs alive
  for (std::size_t k = 0; k < n; ++k) {
    const bool starts = k > 0 && !r.segment_of.empty() && r.segment_of[k] != r.segment_of[k - 1];
    if (starts) {  // the previous segment's last output is this one's kept input
      inputs_kept += out[k - 1];
      segment = 0;
    }
    segment += out[k];
    const double before = r.segment_of.empty() ? input : inputs_kept;  // without: every output so far
    a.backward = std::max(a.backward, before + segment + out[k] + (k == 0 ? input : out[k - 1]));
  }
  return a;
}

// What a prediction derives once from the profile, cluster and layout, the same for every stage.
struct Setting {
  const Profile& profile;
  const Layout& layout;
  int D = 1, S = 1, T = 1, M = 1, P = 1;
  double m = 0;  // images a rank's micro-batch holds
  std::vector<char> split{};
  bool gathers = false;
  std::size_t gather = 0;  // where a split group's batch is gathered (the layer count where none is)
  const Link* tensor_link = nullptr;  // the profile's, by where each group's ranks lie
  const Link* stage_link = nullptr;
  const Link* replica_link = nullptr;
  // Parameters hold their value, gradient, blocked copy and optimizer state, 4 bytes each; with ZeRO's
  // stage 1 each replica keeps the optimizer's state, and updates the parameters, for 1/D of them; with
  // stage 2 it keeps 1/D of the reduced gradients too (and the buckets in flight, below); with stage 3 1/D of
  // the values as well (and the layers gathered, below).
  // With micro-batches every one but the last writes the whole gradient, which stays until the last one's
  // buckets are reduced: stage 2 saves gradient memory only with one.
  bool gradients_sharded = false, params_sharded = false;
  double state_share = 1, gradient_share = 1, value_share = 1;
  double param_scale = 1, activation_scale = 1, split_block_scale = 1;

  double param_bytes(double params, double values, double share, double gradients) const {
    return 4.0 * params * (values + 1.0 + gradients + profile.optimizer_floats * share);
  }
  // A layer's images in one micro-batch: the group's gathered batch from the gather on.
  double rows(std::size_t i) const { return gathers && i >= gather ? T * m : m; }
};

// The layers each split layer index names, checked against the profile and the cut against its layers.
std::vector<char> checked_split(const Profile& profile, const Cluster& cluster, const Layout& layout) {
  const std::size_t L = profile.layers.size();
  if (layout.replicas < 1 || layout.stages < 1 || layout.tensor < 1 || layout.micro_batches < 1 ||
      layout.ranks() != cluster.ranks)
    throw InputError("layout " + layout.describe() + " does not fill " + std::to_string(cluster.ranks) + " ranks");
  if (layout.cut.size() != static_cast<std::size_t>(layout.stages))
    throw InputError("layout " + layout.describe() + ": one layer count per stage");
  std::size_t covered = 0;
  for (auto c : layout.cut) covered += c;
  if (covered != L) throw InputError("layout " + layout.describe() + ": its cut does not cover the model's layers");
  std::vector<char> split(L, 0);
  for (auto i : layout.split) {
    if (i >= L || profile.layers[i].split != layout.split_kind ||
        !layout.may_split(layout.split_kind, profile.layers[i].divisor))
      throw InputError("layout " + layout.describe() + ": layer " + std::to_string(i) + " cannot split " +
                       std::to_string(layout.tensor) + " ways");
    split[i] = 1;
  }
  return split;
}

// The formula's memory for one rank training the whole model at the profiled batch, against the measured
// figure. The parameters' bytes are known; what the formula misses is mostly the layers' inner activations
// (a transformer block's attention scores and hidden layer, a convolution's scratch), which grow with the
// images as the outputs do: so the activations take the difference, a scale for every layout's. (Scaling
// the parameters' bytes as well overstated what sharding, pipelines and split layers save: ViT-B/16 split
// across pairs was planned at 1.74 GB and peaked at 2.69.) Where the formula's parameters alone exceed the
// measured figure, both take its scale.
// A split block keeps its output whole, and of its inner activations (what the scale adds) the split ones
// (queries, keys and values, attention scores, the hidden layer) in the group's share but the whole ones
// (the normalised input, the partial sums reduced across the group) whole: taken as half and half. With
// all of them split, ViT-B/16 split across pairs was planned at 1.56 GB and peaked at 1.81.
void calibrate_memory(Setting& c) {
  const Profile& profile = c.profile;
  if (profile.measured_bytes > 0) {
    double params_formula = 0;
    std::vector<double> out;
    for (const auto& l : profile.layers) {
      params_formula += c.param_bytes(l.params, 1, 1, 1);
      out.push_back(profile.batch * l.output_bytes);
    }
    const double activations = activations_of(profile.batch * profile.layers.front().input_bytes, out, {}).backward;
    if (profile.measured_bytes > params_formula && activations > 0) {
      c.activation_scale = (profile.measured_bytes - params_formula) / activations;
    } else {
      c.param_scale = c.activation_scale = profile.measured_bytes / (params_formula + activations);
    }
  }
  c.split_block_scale = 1 + (c.activation_scale - 1) * (0.5 + 0.5 / c.T);
}

Setting setting_of(const Profile& profile, const Cluster& cluster, const Layout& layout, int global_batch) {
  Setting c{profile, layout};
  c.D = layout.replicas, c.S = layout.stages, c.T = layout.tensor, c.M = layout.micro_batches;
  c.split = checked_split(profile, cluster, layout);
  c.gathers = layout.gathers_batch();
  c.gather = c.gathers ? layout.split.front() : profile.layers.size();
  const int data_ranks = layout.data_ranks();
  if (global_batch % data_ranks != 0 || (global_batch / data_ranks) % c.M != 0)
    throw InputError("layout " + layout.describe() + ": a global batch of " + std::to_string(global_batch) +
                     " does not divide among its ranks and micro-batches");
  c.m = static_cast<double>(global_batch / data_ranks / c.M);
  c.P = cluster.ranks_per_node;
  c.tensor_link = within_a_node(1, c.T, c.P) ? &profile.within_node : &profile.between_nodes;
  c.stage_link = within_a_node(c.T, c.S, c.P) ? &profile.within_node : &profile.between_nodes;
  c.replica_link = within_a_node(c.S * c.T, c.D, c.P) ? &profile.within_node : &profile.between_nodes;
  c.gradients_sharded = layout.shards_gradients() && c.M == 1;
  c.state_share = layout.shards_optimizer_state() ? 1.0 / c.D : 1.0;
  c.gradient_share = c.gradients_sharded ? 1.0 / c.D : 1.0;
  c.params_sharded = layout.shards_parameters();
  c.value_share = c.params_sharded ? 1.0 / c.D : 1.0;
  calibrate_memory(c);
  return c;
}

// One stage's layers [first, end) over a micro-batch: compute, collectives, bytes sent and parameters.
struct StageLayers {
  double slot = 0, comm = 0, sent = 0, params = 0, whole = 0, largest = 0, recomputed_params = 0;
  double forward = 0, forward_comm = 0;  // the slot's forward: its compute, its collectives
  // Stage 3's gathers of every layer with parameters, one at a time: all, and the recomputed ones'.
  double param_gathers = 0, gathers_again = 0;
  double bucket = 0;        // the gradient bucket reduced at a time: the layout's, at most the stage's gradients
  std::vector<double> out;  // each layer's output bytes, one micro-batch's
};

// A split layer's collectives in one micro-batch: forward's, and both ways'; adds the bytes it sends.
std::pair<double, double> split_collectives(const Setting& c, std::size_t i, double& sent) {
  const LayerCost& l = c.profile.layers[i];
  const double rows = c.rows(i);
  const int T = c.T;
  if (l.split == SplitKind::dense) {
    double ahead = gather_s(*c.tensor_link, T, rows * l.output_bytes / T), back = 0;  // the outputs' shares
    sent += (T - 1) * rows * l.output_bytes / T;
    if (i == c.gather) {  // the features gathered, their gradient reduce-scattered
      ahead += gather_s(*c.tensor_link, T, c.m * l.input_bytes);
      back = gather_s(*c.tensor_link, T, c.m * l.input_bytes);
      sent += 2 * (T - 1) * c.m * l.input_bytes;
    } else {  // the input gradient summed
      back = all_reduce_s(*c.tensor_link, T, rows * l.input_bytes);
      sent += all_reduce_sent(T, rows * l.input_bytes);
    }
    return {ahead, ahead + back};
  }
  // A block: one all-reduce of its output each way.
  const double each_way = all_reduce_s(*c.tensor_link, T, rows * l.output_bytes);
  sent += 2 * all_reduce_sent(T, rows * l.output_bytes);
  return {each_way, 2 * each_way};
}

StageLayers stage_layers(const Setting& c, int s, std::size_t first, std::size_t end, double in_flight,
                         const Recomputation& recomputation, std::vector<LayerPrediction>& predictions) {
  StageLayers t;
  for (std::size_t i = first; i < end; ++i) {
    const LayerCost& l = c.profile.layers[i];
    const double rows = c.rows(i);
    const double share = c.split[i] ? 1.0 / c.T : 1.0;
    const double work_share = c.split[i] ? l.whole_share + (1 - l.whole_share) / c.T : 1.0;
    const double before = t.comm, sent_before = t.sent;
    // A split layer's share of its images' time (and what stays whole of it), but a whole call's fixed
    // cost; a recomputed layer's forward runs again: a third of its time (backward taken as two thirds).
    const double call = l.fixed_seconds + (l.call_seconds(rows, c.profile.batch) - l.fixed_seconds) * work_share;
    const double compute = call * (recomputation.again(i) ? 1 + kForwardShare : 1);
    t.slot += compute;
    t.forward += kForwardShare * call;
    t.params += l.params * share;
    t.largest = std::max(t.largest, l.params * share);
    if (recomputation.again(i)) t.recomputed_params += l.params * share;
    if (c.params_sharded && l.params > 0) {
      const double g = layer_gather_s(*c.replica_link, c.D, l.params * share) + c.profile.gather_extra_s;
      t.param_gathers += g;
      if (recomputation.again(i)) t.gathers_again += g;
    }
    if (c.T > 1 && !c.split[i]) t.whole += l.params;  // averaged over the group too
    t.out.push_back(rows * l.output_bytes *
                    (c.split[i] && l.split == SplitKind::block ? std::min(c.activation_scale, c.split_block_scale)
                                                               : c.activation_scale));
    const double kept = recomputation.keeps(i) ? t.out.back() : 0;
    if (c.split[i]) {
      const auto [ahead, both] = split_collectives(c, i, t.sent);
      t.forward_comm += ahead;
      t.comm += both;
    }
    predictions.push_back(
        {s, c.split[i] != 0, c.M * (compute + t.comm - before), c.M * compute,
         c.param_scale * c.param_bytes(l.params * share, c.value_share, c.state_share, c.gradient_share) +
             in_flight * kept,
         c.M * (t.sent - sent_before)});
  }
  t.bucket = std::min(c.layout.reduce_bucket_bytes(), 4 * t.params);
  return t;
}

// The communication after a stage's last backward (its gradients reduced, stage 3's gathers), by how the
// layout reduces: `serial_reduce` takes the part that runs before the next stage may go on.
double reduce_comm_of(const Setting& c, const StageLayers& t, double group_reduce, double& serial_reduce) {
  const Layout& layout = c.layout;
  const int D = c.D;
  double reduce_comm = all_reduce_s(*c.replica_link, D, 4 * t.params) + group_reduce;
  const double bucket = t.bucket;
  // The last micro-batch's backward (taken as two thirds of a layer's time), and half the stage's all-reduce.
  const double backward = (1 - kForwardShare) * (t.slot - t.comm);
  const double half = all_reduce_s(*c.replica_link, D, 4 * t.params) / 2;
  if (c.params_sharded && layout.plain_data_parallel()) {
    // The reduce-scatter overlaps backward as stage 2's; the layers' gathers are counted in full: a layer
    // ahead on the bucket thread they may overlap compute, but on 2 cores vgg16_cifar's did not (a third of
    // stage 0's speed, docs/performance.md), so the planner takes stage 3 for its memory, not its speed.
    reduce_comm = std::max(all_reduce_s(*c.replica_link, D, bucket) / 2, half - backward) +
                  c.M * (2 * t.param_gathers + t.gathers_again);
  } else if (c.params_sharded) {
    serial_reduce += half;  // the reduce-scatter; nothing follows the update
    reduce_comm = group_reduce;
  } else if (layout.buckets_overlap_backward() && D > 1) {
    // Buckets all-reduce while that backward runs: only what it does not cover shows, and at least the
    // last bucket.
    reduce_comm = std::max(all_reduce_s(*c.replica_link, D, bucket), reduce_comm - backward);
  } else if (layout.shards_gradients() && layout.plain_data_parallel()) {
    // Stage 2's buckets go to their owners (half an all-reduce) during backward likewise; the parameters'
    // all-gather, the other half, follows the update.
    reduce_comm = half + std::max(all_reduce_s(*c.replica_link, D, bucket) / 2, half - backward);
  } else if (layout.shards_gradients()) {
    serial_reduce += half;
    reduce_comm = half + group_reduce;
  }
  return reduce_comm;
}

// A stage's rank's peak: its parameters and their state, the micro-batches' activations in flight while one
// runs its backward, what sharding holds beside its share, and the all-reduce's buffers.
double stage_peak_bytes(const Setting& c, const Cluster& cluster, const StageLayers& t, std::size_t first,
                        double in_flight, const Recomputation& recomputation) {
  const int D = c.D;
  const Activations a =
      activations_of(c.activation_scale * c.m * c.profile.layers[first].input_bytes, t.out, recomputation);
  // Stage 2 holds, beside its shard, a bucket being reduced and the next one filling, each with up to a
  // layer whose whole gradient one call writes (VGG16's first dense layer: 74% of its gradients). Not
  // modelled: buckets queued behind a reduction slower than backward.
  const double unreduced =
      c.gradients_sharded ? std::min(2 * (t.bucket + 4 * t.largest), 4 * t.params * (1 - 1.0 / D)) : 0;
  // Stage 3 holds the layer running and the one gathered ahead whole.
  const double gathered = c.params_sharded ? std::min(2 * 4 * t.largest, 4 * t.params * (1 - 1.0 / D)) : 0;
  const double memory =
      c.profile.base_bytes +
      c.param_scale * (c.param_bytes(t.params, c.value_share, c.state_share, c.gradient_share) + unreduced + gathered) +
      (in_flight - 1) * a.kept + a.backward;
  // The all-reduce's own buffers; a sharded state's go through the ring's halves whatever the algorithm.
  const int replicas_on_a_node = std::clamp(c.P / (c.S * c.T), 1, D);
  const double reduce_buffers =
      4.0 * t.params *
      reduce_buffer_floats(cluster.node_windows && !c.layout.shards_optimizer_state(), D, replicas_on_a_node);
  return memory + reduce_buffers;
}

}  // namespace

Prediction predict(const Profile& profile, const Cluster& cluster, const Layout& layout, int global_batch) {
  const Setting c = setting_of(profile, cluster, layout, global_batch);
  const int D = c.D, S = c.S, T = c.T, M = c.M;
  Prediction p;
  // Each stage's micro-batch (and its compute alone) and each link's message, for the schedule's timing
  // below.
  std::vector<StageSeconds> stage_seconds, stage_compute;
  std::vector<MessageSeconds> message_seconds;
  // Stage 2 in a pipeline reduces each bucket in its stage's last backward, before the stage sends on its
  // input gradient: the stages' reduce-scatters come one after another.
  double serial_reduce = 0;
  std::size_t first = 0;
  for (int s = 0; s < S; ++s) {
    const std::size_t end = first + layout.cut[static_cast<std::size_t>(s)];
    // 1F1B keeps min(M, S - s) micro-batches on stage s; GPipe all of them.
    const double in_flight = layout.schedule == PipelineSchedule::gpipe ? M : std::min(M, S - s);
    const Recomputation recomputation = layout.recomputes(s) ? recomputation_of(profile, first, end) : Recomputation{};
    StageLayers t = stage_layers(c, s, first, end, in_flight, recomputation, p.layers);
    // Stage 3 gathers the stage's parameters in each micro-batch's forward and backward (the recomputed
    // layers' once more); a pipeline gathers each layer on its own thread, in the slot.
    if (c.params_sharded && !layout.plain_data_parallel()) {
      t.comm += 2 * t.param_gathers + t.gathers_again;
      t.forward_comm += t.param_gathers;
    }
    if (s + 1 < S) {  // the activations forward and their gradient back, each micro-batch
      const LayerCost& last = profile.layers[end - 1];
      const double bytes = c.rows(end - 1) * (last.output_bytes + last.side_bytes);
      const double message = c.stage_link->message_s(bytes);
      t.sent += 2 * bytes;
      // The next message may go while this one's latency runs: the link is taken only for its bytes.
      message_seconds.push_back({message, std::min(message, bytes / c.stage_link->bytes_per_s)});
    }
    stage_compute.push_back({t.forward, t.slot - t.forward});
    t.slot += t.comm;
    stage_seconds.push_back({t.forward + t.forward_comm, t.slot - t.forward - t.forward_comm});
    // The whole layers' gradients averaged over a split group too, sharded only in the replica's shard. A
    // replica whose shard holds all of them, or a shard's worth, sets the step (AlexNet's convolutions come
    // first in a rank's buffer and fit one shard; VGG16-CIFAR's fill two).
    const double whole_reduced = layout.shards_optimizer_state() ? std::min(t.whole, t.params / D) : t.whole;
    const double group_reduce = all_reduce_s(*c.tensor_link, T, 4 * whole_reduced);
    const double reduce_comm = reduce_comm_of(c, t, group_reduce, serial_reduce);
    const double reduce = reduce_comm + t.params * c.state_share * profile.optimizer_s_per_param;
    if (reduce > p.reduce_s) p.reduce_s = reduce;
    p.comm_s = std::max(p.comm_s, reduce_comm);  // completed below with what communication adds to the stages
    const double gathers_sent = c.params_sharded
                                    ? M * all_reduce_sent(D, 4 * (2 * t.params + t.recomputed_params)) / 2 -
                                          all_reduce_sent(D, 4 * t.params) / 2
                                    : 0;  // in place of the all-gather after the update
    const double step_sent =
        (M + 0.0) * t.sent + all_reduce_sent(D, 4 * t.params) + all_reduce_sent(T, 4 * whole_reduced) + gathers_sent;
    p.sent_bytes = std::max(p.sent_bytes, step_sent);
    const double peak = stage_peak_bytes(c, cluster, t, first, in_flight, recomputation);
    p.stage_peak_bytes.push_back(peak);
    p.peak_bytes = std::max(p.peak_bytes, peak);
    first = end;
  }
  // The schedule's step, its stages' micro-batches and messages timed in their order: one micro-batch's
  // path plus M - 1 of the busiest stage missed that the second micro-batch's forward overlaps the first's
  // path, and that 1F1B's micro-batches in flight wait for slow messages. Its communication is what the
  // collectives and messages add to the step, which the same schedule without them tells.
  p.compute_s = pipeline_step_seconds(layout.schedule, stage_seconds, message_seconds, M);
  const double without_comm =
      pipeline_step_seconds(layout.schedule, stage_compute, std::vector<MessageSeconds>(message_seconds.size()), M);
  p.comm_s += p.compute_s - without_comm + serial_reduce;
  p.step_s = p.compute_s + serial_reduce + p.reduce_s;
  return p;
}

}  // namespace ddl
