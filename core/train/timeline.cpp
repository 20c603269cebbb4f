#include "core/train/timeline.hpp"

namespace ddl {

std::string Timeline::json_events(int pid, const std::string& label) const {
  const std::string p = std::to_string(pid);
  std::string out = R"({"name": "process_name", "ph": "M", "pid": )" + p + R"(, "args": {"name": ")" + label + R"("}})";
  for (const auto& e : events_) {
    out += ",\n";
    out += R"({"name": ")" + std::string(e.name) + R"(", "ph": "X", "pid": )" + p + R"(, "tid": 0, "ts": )" +
           std::to_string(e.start_us) + R"(, "dur": )" + std::to_string(e.duration_us);
    if (e.micro >= 0) out += R"(, "args": {"micro-batch": )" + std::to_string(e.micro) + "}";
    out += "}";
  }
  return out;
}

}  // namespace ddl
