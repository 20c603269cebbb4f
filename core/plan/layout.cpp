#include "core/plan/layout.hpp"

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
  if (recompute) s << ", activations recomputed";
  return s.str();
}

}  // namespace ddl
