#include "core/plan/layout.hpp"

#include <sstream>

namespace ddl {

std::string Layout::sharded_state() const {
  if (shards_parameters()) return "optimizer state, gradients and parameters";
  return shards_gradients() ? "optimizer state and gradients" : "optimizer state";
}

std::string Layout::describe() const {
  std::ostringstream s;
  s << replicas << " x " << stages << " x " << tensor << ", " << micro_batches << " micro-batch"
    << (micro_batches > 1 ? "es" : "");
  if (stages > 1) {
    s << ", cut";
    for (std::size_t i = 0; i < cut.size(); ++i) s << (i ? "," : " ") << cut[i];
  }
  if (stages > 1 && schedule == PipelineSchedule::gpipe) s << ", gpipe";
  if (!split.empty()) {
    s << ", split";
    for (std::size_t i = 0; i < split.size(); ++i) s << (i ? "," : " ") << split[i];
  }
  s << ", batch " << batch;
  if (shards_optimizer_state()) s << ", " << sharded_state() << " sharded";
  s << recompute_note();
  return s.str();
}

bool Layout::recomputes_any() const {
  for (int stage = 0; stage < stages; ++stage)
    if (recomputes(stage)) return true;
  return false;
}

std::string Layout::recompute_note() const {
  std::vector<int> on;
  for (int stage = 0; stage < stages; ++stage)
    if (recomputes(stage)) on.push_back(stage);
  if (on.empty()) return "";
  std::string note = ", activations recomputed";
  if (static_cast<int>(on.size()) == stages) return note;
  note += on.size() > 1 ? " on stages" : " on stage";
  for (std::size_t k = 0; k < on.size(); ++k) note += (k ? "," : " ") + std::to_string(on[k]);
  return note;
}

}  // namespace ddl
