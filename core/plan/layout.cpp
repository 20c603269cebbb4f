#include "core/plan/layout.hpp"

#include <algorithm>
#include <sstream>

namespace ddl {

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
  if (shards_optimizer_state()) s << ", optimizer state sharded";
  s << recompute_note();
  return s.str();
}

bool Layout::recomputes_any() const { return std::find(recompute.begin(), recompute.end(), 1) != recompute.end(); }

std::string Layout::recompute_note() const {
  if (!recomputes_any()) return "";
  std::string note = ", activations recomputed";
  if (std::find(recompute.begin(), recompute.end(), 0) == recompute.end()) return note;
  note += std::count(recompute.begin(), recompute.end(), 1) > 1 ? " on stages" : " on stage";
  const char* separator = " ";
  for (int stage = 0; stage < stages; ++stage)
    if (recomputes(stage)) {
      note += separator + std::to_string(stage);
      separator = ",";
    }
  return note;
}

}  // namespace ddl
