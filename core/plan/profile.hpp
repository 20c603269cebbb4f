// What the planner knows about a model and the machines it runs on (Baligodugula and Amsaad's profile, 2025):
// each layer's measured compute time and sizes, the optimizer's cost, and a latency + bandwidth model of the
// links within a node and between nodes. Plain data, measured by ddl_train on the job's own ranks (launch/)
// or read from a file, so that planning needs no MPI and runs on a laptop.
#pragma once

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
};

// Seconds to move `bytes` once between two ranks: latency + bytes / bandwidth.
struct Link {
  double latency_s = 0;
  double bytes_per_s = 1e9;
  double seconds(double bytes) const { return latency_s + bytes / bytes_per_s; }
  // "50.0 us + 1.25 GB/s" (three digits: a throttled link's 0.00219 GB/s too).
  std::string describe() const;
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
  std::vector<LayerCost> layers;
  Link within_node, between_nodes;
};

// A text form ("key value" lines, one "layer" line per layer), to keep a profile and plan from it later.
std::string to_text(const Profile& profile);
// Throws InputError naming `source` and the line for anything it cannot read.
Profile profile_from_text(const std::string& text, const std::string& source);

}  // namespace ddl
