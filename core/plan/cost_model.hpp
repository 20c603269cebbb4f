// The planner's cost model: a layout's predicted step time and peak memory per rank from a profile
// (after Baligodugula and Amsaad, "Optimizing Distributed Training Approaches for Scaling Neural Networks",
// 2025: compute from the measured layers, communication from activation and gradient sizes).
//   - Compute: each layer's call on the images it sees (LayerCost::call_seconds); a split layer's share of
//     its images' time, of a gathered batch or of a shared one, 1/T but for what stays whole on every rank
//     (LayerCost::whole_share); a pipeline's step is its schedule run (pipeline_step_seconds: each
//     stage's forwards and backwards in GPipe's or 1F1B's order, each waiting for what it takes from the
//     stage before or after; with equal stages and free links, (M + S - 1) slots).
//   - Communication: split layers' collectives inside each slot; after backward, each stage's gradients
//     all-reduced over its D replicas (and those of whole parameters over its tensor group), then the
//     optimizer; nothing overlapped (ddl_train averages after the step when S or T > 1), except plain data
//     parallelism's buckets (--bucket-mb) under backward. Collectives are costed as rings: an all-reduce
//     of B bytes over n ranks takes 2 (n - 1) ring steps of B / n bytes, each as long as the link takes
//     for that size, and sends 2 (n - 1) / n B; an all-gather or reduce-scatter half of that. A pipeline's
//     message arrives the link's time for a message of its size after it is sent, and takes the link for
//     its bytes alone. The ring steps are timed with the replicas' all-reduce; split layers' collectives (MPI's, or the
//     ring) are taken at the same times.
//   - Memory: parameters, gradients, optimizer state and a blocked weight copy (a split layer's 1/T), the
//     activations of the micro-batches a stage keeps in flight (1F1B or GPipe) while one of them runs its
//     backward (at each layer: the outputs kept up to it and the gradients of its output and input),
//     scaled by what one rank was measured to hold against what this formula says for it; the
//     all-reduce's buffers with replicas (see reduce_buffer_floats); and the profile's base.
//   - Sharded optimizer state (ZeRO stage 1, over D > 1 replicas): each rank holds 1/D of the state and
//     runs 1/D of the optimizer; the reduce-scatter and all-gather send the all-reduce's bytes in its time.
//   - Recomputed activations (a stage's segments, by recompute_segments): only the last segment's outputs
//     and each segment's input are kept per micro-batch in flight; a recomputed segment's backward holds
//     the inputs of the segments up to it and its own outputs again; every recomputed layer's forward (a
//     third of its time) runs again.
// Links: a group whose ranks all sit on one node uses the profile's within-node link, else the other.
#pragma once

#include "core/plan/layout.hpp"
#include "core/plan/profile.hpp"

namespace ddl {

struct Cluster {
  int ranks = 1;
  int ranks_per_node = 1;
  // The gradient all-reduce sums through shared-memory windows within a node (ddl's hierarchical one),
  // which hold more than a ring's buffers.
  bool node_windows = false;
};

// One layer under a layout, per step on its rank: what the plan report shows per component.
struct LayerPrediction {
  int stage = 0;
  bool split = false;
  double seconds = 0;       // compute and its split collectives, over the step's micro-batches
  double compute_s = 0;     // the compute alone
  double memory_bytes = 0;  // parameters and their state, and the activations kept
  double sent_bytes = 0;    // the split collectives'
};

struct Prediction {
  std::vector<LayerPrediction> layers;
  double step_s = 0;
  double compute_s = 0;                  // the pipeline's slots, split layers' collectives and messages included
  double reduce_s = 0;                   // gradient all-reduces and the optimizer, after backward
  double peak_bytes = 0;                 // the largest rank's
  std::vector<double> stage_peak_bytes;  // each stage's rank's
  double sent_bytes = 0;                 // per step, by the busiest rank
  double comm_share() const { return step_s > 0 ? comm_s / step_s : 0; }
  double comm_s = 0;  // the communication within step_s
};

// Global batch: the images of one step over the whole job. Throws InputError for a layout the profile
// cannot run (a cut or split that does not fit the model, a batch that does not divide).
Prediction predict(const Profile& profile, const Cluster& cluster, const Layout& layout, int global_batch);

// The ring steps of one stage-3 gather of a layer's `params` parameters from `replicas` ranks over `link`
// (half an all-reduce of them); the plan adds the profile's gather_extra_s to each.
double layer_gather_s(const Link& link, int replicas, double params);

}  // namespace ddl
