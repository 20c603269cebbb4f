#include "core/plan/cost_model.hpp"

#include <algorithm>

#include "core/error.hpp"
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

}  // namespace

Prediction predict(const Profile& profile, const Cluster& cluster, const Layout& layout, int global_batch) {
  const int D = layout.replicas, S = layout.stages, T = layout.tensor, M = layout.micro_batches;
  const std::size_t L = profile.layers.size();
  if (D < 1 || S < 1 || T < 1 || M < 1 || layout.ranks() != cluster.ranks)
    throw InputError("layout " + layout.describe() + " does not fill " + std::to_string(cluster.ranks) + " ranks");
  if (layout.cut.size() != static_cast<std::size_t>(S))
    throw InputError("layout " + layout.describe() + ": one layer count per stage");
  std::size_t covered = 0;
  for (auto c : layout.cut) covered += c;
  if (covered != L) throw InputError("layout " + layout.describe() + ": its cut does not cover the model's layers");
  std::vector<char> split(L, 0);
  for (auto i : layout.split) {
    if (i >= L || profile.layers[i].split != layout.split_kind ||
        !layout.may_split(layout.split_kind, profile.layers[i].divisor))
      throw InputError("layout " + layout.describe() + ": layer " + std::to_string(i) + " cannot split " +
                       std::to_string(T) + " ways");
    split[i] = 1;
  }
  const bool gathers = layout.gathers_batch();
  const std::size_t gather = gathers ? layout.split.front() : L;  // where the group's batch is gathered
  const int data_ranks = layout.data_ranks();
  if (global_batch % data_ranks != 0 || (global_batch / data_ranks) % M != 0)
    throw InputError("layout " + layout.describe() + ": a global batch of " + std::to_string(global_batch) +
                     " does not divide among its ranks and micro-batches");
  const double m = static_cast<double>(global_batch / data_ranks / M);  // images a rank's micro-batch holds
  const int P = cluster.ranks_per_node;
  const Link& tensor_link = within_a_node(1, T, P) ? profile.within_node : profile.between_nodes;
  const Link& stage_link = within_a_node(T, S, P) ? profile.within_node : profile.between_nodes;
  const Link& replica_link = within_a_node(S * T, D, P) ? profile.within_node : profile.between_nodes;

  // The formula's memory for one rank training the whole model at the profiled batch, against the
  // measured figure: the scale for every layout's.
  // Parameters hold their value, gradient, blocked copy and optimizer state, 4 bytes each; with ZeRO's
  // stage 1 each replica keeps the optimizer's state, and updates the parameters, for 1/D of them; with
  // stage 2 it keeps 1/D of the reduced gradients too (and the buckets in flight, below); with stage 3 1/D of
  // the values as well (and the layers gathered, below).
  // With micro-batches every one but the last writes the whole gradient, which stays until the last one's
  // buckets are reduced: stage 2 saves gradient memory only with one.
  const bool gradients_sharded = layout.shards_gradients() && M == 1;
  const double state_share = layout.shards_optimizer_state() ? 1.0 / D : 1.0;
  const double gradient_share = gradients_sharded ? 1.0 / D : 1.0;
  const bool params_sharded = layout.shards_parameters();
  const double value_share = params_sharded ? 1.0 / D : 1.0;
  auto param_bytes = [&](double params, double values, double share, double gradients) {
    return 4.0 * params * (values + 1.0 + gradients + profile.optimizer_floats * share);
  };
  // The formula's memory for one rank training the whole model at the profiled batch, against the measured
  // figure. The parameters' bytes are known; what the formula misses is mostly the layers' inner activations
  // (a transformer block's attention scores and hidden layer, a convolution's scratch), which grow with the
  // images as the outputs do: so the activations take the difference, a scale for every layout's. (Scaling
  // the parameters' bytes as well overstated what sharding, pipelines and split layers save: ViT-B/16 split
  // across pairs was planned at 1.74 GB and peaked at 2.69.) Where the formula's parameters alone exceed the
  // measured figure, both take its scale.
  double param_scale = 1, activation_scale = 1;
  if (profile.measured_bytes > 0) {
    double params_formula = 0;
    std::vector<double> out;
    for (const auto& l : profile.layers) {
      params_formula += param_bytes(l.params, 1, 1, 1);
      out.push_back(profile.batch * l.output_bytes);
    }
    const double activations = activations_of(profile.batch * profile.layers.front().input_bytes, out, {}).backward;
    if (profile.measured_bytes > params_formula && activations > 0) {
      activation_scale = (profile.measured_bytes - params_formula) / activations;
    } else {
      param_scale = activation_scale = profile.measured_bytes / (params_formula + activations);
    }
  }
  // A split block keeps its output whole, and of its inner activations (what the scale adds) the split ones
  // (queries, keys and values, attention scores, the hidden layer) in the group's share but the whole ones
  // (the normalised input, the partial sums reduced across the group) whole: taken as half and half. With
  // all of them split, ViT-B/16 split across pairs was planned at 1.56 GB and peaked at 1.81.
  const double split_block_scale = 1 + (activation_scale - 1) * (0.5 + 0.5 / T);
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
    double slot = 0, comm = 0, sent = 0, params = 0, whole = 0, largest = 0, recomputed_params = 0;
    double forward = 0, forward_comm = 0;  // the slot's forward: its compute, its collectives
    // Stage 3's gathers of every layer with parameters, one at a time: all, and the recomputed ones'.
    double param_gathers = 0, gathers_again = 0;
    std::vector<double> out;  // each layer's output bytes, one micro-batch's
    // 1F1B keeps min(M, S - s) micro-batches on stage s; GPipe all of them.
    const double in_flight = layout.schedule == PipelineSchedule::gpipe ? M : std::min(M, S - s);
    const Recomputation recomputation = layout.recomputes(s) ? recomputation_of(profile, first, end) : Recomputation{};
    for (std::size_t i = first; i < end; ++i) {
      const LayerCost& l = profile.layers[i];
      const double rows = gathers && i >= gather ? T * m : m;
      const double share = split[i] ? 1.0 / T : 1.0;
      const double work_share = split[i] ? l.whole_share + (1 - l.whole_share) / T : 1.0;
      const double before = comm, sent_before = sent;
      // A split layer's share of its images' time (and what stays whole of it), but a whole call's fixed
      // cost; a recomputed layer's forward runs again: a third of its time (backward taken as two thirds).
      const double call = l.fixed_seconds + (l.call_seconds(rows, profile.batch) - l.fixed_seconds) * work_share;
      const double compute = call * (recomputation.again(i) ? 1 + kForwardShare : 1);
      slot += compute;
      forward += kForwardShare * call;
      params += l.params * share;
      largest = std::max(largest, l.params * share);
      if (recomputation.again(i)) recomputed_params += l.params * share;
      if (params_sharded && l.params > 0) {
        const double g = layer_gather_s(replica_link, D, l.params * share) + profile.gather_extra_s;
        param_gathers += g;
        if (recomputation.again(i)) gathers_again += g;
      }
      if (T > 1 && !split[i]) whole += l.params;  // averaged over the group too
      out.push_back(rows * l.output_bytes *
                    (split[i] && l.split == SplitKind::block ? std::min(activation_scale, split_block_scale)
                                                             : activation_scale));
      const double kept = recomputation.keeps(i) ? out.back() : 0;
      if (split[i] && l.split == SplitKind::dense) {
        double ahead = gather_s(tensor_link, T, rows * l.output_bytes / T), back = 0;  // the outputs' shares
        sent += (T - 1) * rows * l.output_bytes / T;
        if (i == gather) {  // the features gathered, their gradient reduce-scattered
          ahead += gather_s(tensor_link, T, m * l.input_bytes);
          back = gather_s(tensor_link, T, m * l.input_bytes);
          sent += 2 * (T - 1) * m * l.input_bytes;
        } else {  // the input gradient summed
          back = all_reduce_s(tensor_link, T, rows * l.input_bytes);
          sent += all_reduce_sent(T, rows * l.input_bytes);
        }
        forward_comm += ahead;
        comm += ahead + back;
      } else if (split[i]) {  // a block: one all-reduce of its output each way
        const double each_way = all_reduce_s(tensor_link, T, rows * l.output_bytes);
        forward_comm += each_way;
        comm += 2 * each_way;
        sent += 2 * all_reduce_sent(T, rows * l.output_bytes);
      }
      p.layers.push_back({s, split[i] != 0, M * (compute + comm - before), M * compute,
                          param_scale * param_bytes(l.params * share, value_share, state_share, gradient_share) +
                              in_flight * kept,
                          M * (sent - sent_before)});
    }
    // Stage 3 gathers the stage's parameters in each micro-batch's forward and backward (the recomputed
    // layers' once more); a pipeline gathers each layer on its own thread, in the slot.
    if (params_sharded && !layout.plain_data_parallel()) {
      comm += 2 * param_gathers + gathers_again;
      forward_comm += param_gathers;
    }
    if (s + 1 < S) {  // the activations forward and their gradient back, each micro-batch
      const double rows = gathers && end - 1 >= gather ? T * m : m;
      const double bytes = rows * profile.layers[end - 1].output_bytes;
      const double message = stage_link.message_s(bytes);
      sent += 2 * bytes;
      // The next message may go while this one's latency runs: the link is taken only for its bytes.
      message_seconds.push_back({message, std::min(message, bytes / stage_link.bytes_per_s)});
    }
    stage_compute.push_back({forward, slot - forward});
    slot += comm;
    stage_seconds.push_back({forward + forward_comm, slot - forward - forward_comm});
    // The whole layers' gradients averaged over a split group too, sharded only in the replica's shard. A
    // replica whose shard holds all of them, or a shard's worth, sets the step (AlexNet's convolutions come
    // first in a rank's buffer and fit one shard; VGG16-CIFAR's fill two).
    const double whole_reduced = layout.shards_optimizer_state() ? std::min(whole, params / D) : whole;
    const double group_reduce = all_reduce_s(tensor_link, T, 4 * whole_reduced);
    double reduce_comm = all_reduce_s(replica_link, D, 4 * params) + group_reduce;
    const double bucket = std::min(layout.reduce_bucket_bytes(), 4 * params);
    // The last micro-batch's backward (taken as two thirds of a layer's time), and half the stage's all-reduce.
    const double backward = (1 - kForwardShare) * (slot - comm);
    const double half = all_reduce_s(replica_link, D, 4 * params) / 2;
    if (params_sharded && layout.plain_data_parallel()) {
      // The reduce-scatter overlaps backward as stage 2's; the layers' gathers are counted in full: a layer
      // ahead on the bucket thread they may overlap compute, but on 2 cores vgg16_cifar's did not (a third of
      // stage 0's speed, docs/performance.md), so the planner takes stage 3 for its memory, not its speed.
      reduce_comm = std::max(all_reduce_s(replica_link, D, bucket) / 2, half - backward) +
                    M * (2 * param_gathers + gathers_again);
    } else if (params_sharded) {
      serial_reduce += half;  // the reduce-scatter; nothing follows the update
      reduce_comm = group_reduce;
    } else if (layout.buckets_overlap_backward() && D > 1) {
      // Buckets all-reduce while that backward runs: only what it does not cover shows, and at least the
      // last bucket.
      reduce_comm = std::max(all_reduce_s(replica_link, D, bucket), reduce_comm - backward);
    } else if (layout.shards_gradients() && layout.plain_data_parallel()) {
      // Stage 2's buckets go to their owners (half an all-reduce) during backward likewise; the parameters'
      // all-gather, the other half, follows the update.
      reduce_comm = half + std::max(all_reduce_s(replica_link, D, bucket) / 2, half - backward);
    } else if (layout.shards_gradients()) {
      serial_reduce += half;
      reduce_comm = half + group_reduce;
    }
    const double reduce = reduce_comm + params * state_share * profile.optimizer_s_per_param;
    if (reduce > p.reduce_s) p.reduce_s = reduce;
    p.comm_s = std::max(p.comm_s, reduce_comm);  // completed below with what communication adds to the stages
    const double gathers_sent =
        params_sharded ? M * all_reduce_sent(D, 4 * (2 * params + recomputed_params)) / 2 - all_reduce_sent(D, 4 * params) / 2
                       : 0;  // in place of the all-gather after the update
    const double step_sent =
        (M + 0.0) * sent + all_reduce_sent(D, 4 * params) + all_reduce_sent(T, 4 * whole_reduced) + gathers_sent;
    p.sent_bytes = std::max(p.sent_bytes, step_sent);
    // The micro-batches in flight keep their activations while one of them runs its backward.
    const Activations a = activations_of(activation_scale * m * profile.layers[first].input_bytes, out, recomputation);
    // Stage 2 holds, beside its shard, a bucket being reduced and the next one filling, each with up to a
    // layer whose whole gradient one call writes (VGG16's first dense layer: 74% of its gradients). Not
    // modelled: buckets queued behind a reduction slower than backward.
    const double unreduced =
        gradients_sharded ? std::min(2 * (bucket + 4 * largest), 4 * params * (1 - 1.0 / D)) : 0;
    // Stage 3 holds the layer running and the one gathered ahead whole.
    const double gathered = params_sharded ? std::min(2 * 4 * largest, 4 * params * (1 - 1.0 / D)) : 0;
    const double memory =
        profile.base_bytes +
        param_scale * (param_bytes(params, value_share, state_share, gradient_share) + unreduced + gathered) +
        (in_flight - 1) * a.kept + a.backward;
    // The all-reduce's own buffers; a sharded state's go through the ring's halves whatever the algorithm.
    const int replicas_on_a_node = std::clamp(P / (S * T), 1, D);
    const double reduce_buffers =
        4.0 * params *
        reduce_buffer_floats(cluster.node_windows && !layout.shards_optimizer_state(), D, replicas_on_a_node);
    p.stage_peak_bytes.push_back(memory + reduce_buffers);
    p.peak_bytes = std::max(p.peak_bytes, memory + reduce_buffers);
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
