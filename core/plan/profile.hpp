// What the planner knows about a model and the machines it runs on (Baligodugula and Amsaad's profile, 2025):
// each layer's measured compute time and sizes, the optimizer's cost, and the links within a node and
// between nodes, timed by message size. Plain data, measured by ddl_train on the job's own ranks (launch/)
// or read from a file, so that planning needs no MPI and runs on a laptop.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/plan/layout.hpp"

namespace ddl {

struct LayerCost {
  std::string name;           // as the model table describes it
  double seconds = 0;         // forward + backward per image, on one rank's threads
  double params = 0;          // parameters
  double input_bytes = 0;     // one image's input to the layer (f32)
  double output_bytes = 0;    // one image's output (f32, in bf16 too: see measure_profile)
  SplitKind split = SplitKind::none;
  int divisor = 0;            // what a tensor group's size must divide: a dense layer's outputs, a block's heads
  double fixed_seconds = 0;   // per call, whatever its images: a call's time is fixed + images x seconds
  // The share of `seconds` that splitting across T ranks does not divide (a block's LayerNorms and residual
  // additions): a split call takes fixed_seconds and its images' time x (whole_share + (1 - whole_share) / T).
  double whole_share = 0;
  // A call of one image, measured where a quarter of the profile's batch is more (0: not measured): one image
  // uses a core less well than the line says (ViT-tiny's attention: 0.30 ms, 0.23 on the line).
  double one_image_seconds = 0;
  // 1 where a weight it shares with an earlier layer (an imported graph's initializer that both read) keeps
  // it in that layer's stage: no pipeline cut falls before it. 0 elsewhere.
  double kept_with_previous = 0;
  // One image's side values (open_block.hpp) that cross a cut after this layer besides its output (f32): a
  // stage ending here sends them too.
  double side_bytes = 0;

  // One call's seconds on `images` images, `batch` being the profile's: fixed + images x seconds from a
  // quarter of the batch up; below it, the straight line from the one-image call to that (fewer than one
  // image: one image's).
  double call_seconds(double images, int batch) const;
  void scale(double factor);  // every time figure (kLayerTimes)
};

// LayerCost's time figures: they scale together (a slower rank, a recalibration), and the probe averages
// each over the ranks.
inline constexpr std::array kLayerTimes{&LayerCost::seconds, &LayerCost::fixed_seconds, &LayerCost::one_image_seconds};

// The whole_share of a layer whose call on `rows` images took `split_seconds` split in two (not clamped:
// noise may take it past 0 or 1).
double whole_share_of(const LayerCost& whole, double rows, double split_seconds);

// What moving `bytes` between two ranks took once, measured.
struct Timing {
  double bytes = 0, seconds = 0;
};

// Seconds to move a message between two ranks, by its size, two ways: one step of the project's ring (every
// rank of a group sends to the next and receives from the one before, in the ring's chunks: all-reduces,
// all-gathers, reduce-scatters) and a pipeline's message to a neighbour stage (a non-blocking send). Where
// they were measured, at a few sizes each, interpolated between them: links do not follow one line (MPI's
// change from eager to rendezvous sends, TCP's small messages, ranks sharing cores), and the two ways differ.
// Below the smallest size, its time; beyond the largest, that time and bytes / bandwidth for the bytes
// beyond it (the bandwidth fitted through the smallest and the largest ring step, for messages too);
// where nothing was measured, the line latency + bytes / bandwidth (as given).
struct Link {
  Link() = default;
  Link(double latency, double bandwidth) : latency_s(latency), bytes_per_s(bandwidth) {}
  double latency_s = 0;
  double bytes_per_s = 1e9;
  std::vector<Timing> ring_steps, messages;  // by increasing bytes, seconds never falling
  double ring_step_s(double bytes) const { return interpolated(ring_steps, bytes); }
  double message_s(double bytes) const { return interpolated(messages, bytes); }
  // Every time `factor` times as long (a link measured slower in a run than its probe said).
  Link slowed(double factor) const;
  // This link, timed up to some size, with `before`'s timings of larger sizes (and its bandwidth beyond
  // them) after it, each way scaled by how much slower this link now is at its largest size: a re-plan times
  // the links up to 1 MB only, where the start timed the model's whole all-reduce.
  Link extended_by(const Link& before) const;
  // "50.0 us + 1.25 GB/s" (three digits: a throttled link's 0.00219 GB/s too), and where measured by
  // size, the ring step's and the message's times at the smallest and largest.
  std::string describe() const;

 private:
  double interpolated(const std::vector<Timing>& timings, double bytes) const;
};

struct Profile {
  std::string model;
  int batch = 0;                   // images per rank the times were measured at
  double optimizer_s_per_param = 0;
  double optimizer_floats = 2;     // state floats per parameter (Adam 2, SGD with momentum 1)
  double base_bytes = 0;           // a rank's memory besides the model (runtime, loader, libraries)
  // What one rank training the whole model at `batch` held beyond base_bytes (0: not measured): the cost
  // model's memory figures are scaled to it, for the workspaces, layout copies and pools it does not count.
  double measured_bytes = 0;
  // Each layer gather of ZeRO's stage 3 beyond the link's ring steps (0: not measured): the hand-over to the
  // gathering thread and that thread's time on the cores its rank computes on, which the ring's timings,
  // taken with nothing else running, leave out.
  double gather_extra_s = 0;
  std::vector<LayerCost> layers;
  Link within_node, between_nodes;
};

// One rank's forward and backward of every layer at the profile's batch.
double layers_seconds(const Profile& profile);
// The profile with every layer's times scaled so that layers_seconds() gives `seconds` (a profile of no
// time is returned as it is): the ranks' averaged figures at the pace of the slowest rank, which every
// synchronous step waits for.
Profile at_pace(const Profile& profile, double seconds);

// A text form ("key value" lines, one "layer" line per layer), to keep a profile and plan from it later.
std::string to_text(const Profile& profile);
// Throws InputError naming `source` and the line for anything it cannot read.
Profile profile_from_text(const std::string& text, const std::string& source);

}  // namespace ddl
