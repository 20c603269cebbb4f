#include "core/plan/profile.hpp"

#include <cstdio>
#include <iomanip>
#include <sstream>

#include "core/error.hpp"

namespace ddl {
namespace {

const char* kinds[] = {"none", "dense", "block"};

SplitKind kind_named(const std::string& name, const std::string& where) {
  for (int k = 0; k < 3; ++k)
    if (name == kinds[k]) return static_cast<SplitKind>(k);
  throw InputError(where + ": split kind '" + name + "' is none of none, dense, block");
}

}  // namespace

std::string Link::describe() const {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f us + %.3g GB/s", 1e6 * latency_s, bytes_per_s / 1e9);
  return text;
}

std::string to_text(const Profile& p) {
  std::ostringstream s;
  s << std::setprecision(9);
  s << "ddl-profile 1\nmodel " << p.model << "\nbatch " << p.batch << "\noptimizer_s_per_param "
    << p.optimizer_s_per_param << "\noptimizer_floats " << p.optimizer_floats << "\nbase_bytes " << p.base_bytes << "\nmeasured_bytes " << p.measured_bytes
    << "\nwithin_node " << p.within_node.latency_s << " " << p.within_node.bytes_per_s << "\nbetween_nodes "
    << p.between_nodes.latency_s << " " << p.between_nodes.bytes_per_s << "\n";
  // The name last: it holds spaces.
  for (const auto& l : p.layers)
    s << "layer " << l.seconds << " " << l.params << " " << l.input_bytes << " " << l.output_bytes << " "
      << kinds[static_cast<int>(l.split)] << " " << l.divisor << " " << l.fixed_seconds << " " << l.name << "\n";
  return s.str();
}

Profile profile_from_text(const std::string& text, const std::string& source) {
  Profile p;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  bool header = false;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    const std::string where = source + " line " + std::to_string(number);
    std::istringstream in(line);
    std::string key;
    in >> key;
    bool ok = true;
    if (key == "ddl-profile") {
      int version = 0;
      ok = static_cast<bool>(in >> version) && version == 1;
      header = ok;
    } else if (!header) {
      throw InputError(source + ": not a ddl profile (it starts with no 'ddl-profile 1' line)");
    } else if (key == "model") {
      ok = static_cast<bool>(in >> p.model);
    } else if (key == "batch") {
      ok = static_cast<bool>(in >> p.batch) && p.batch > 0;
    } else if (key == "optimizer_s_per_param") {
      ok = static_cast<bool>(in >> p.optimizer_s_per_param);
    } else if (key == "optimizer_floats") {
      ok = static_cast<bool>(in >> p.optimizer_floats);
    } else if (key == "base_bytes") {
      ok = static_cast<bool>(in >> p.base_bytes);
    } else if (key == "measured_bytes") {
      ok = static_cast<bool>(in >> p.measured_bytes);
    } else if (key == "within_node" || key == "between_nodes") {
      Link& link = key == "within_node" ? p.within_node : p.between_nodes;
      ok = static_cast<bool>(in >> link.latency_s >> link.bytes_per_s) && link.bytes_per_s > 0 && link.latency_s >= 0;
    } else if (key == "layer") {
      LayerCost l;
      std::string kind;
      ok = static_cast<bool>(in >> l.seconds >> l.params >> l.input_bytes >> l.output_bytes >> kind >> l.divisor >>
                             l.fixed_seconds);
      if (ok) {
        l.split = kind_named(kind, where);
        std::getline(in >> std::ws, l.name);
        p.layers.push_back(l);
      }
    } else {
      throw InputError(where + ": unknown key '" + key + "'");
    }
    if (!ok) throw InputError(where + ": cannot read '" + line + "'");
  }
  if (!header || p.layers.empty() || p.batch <= 0)
    throw InputError(source + ": a profile needs its 'ddl-profile 1' line, a batch and at least one layer");
  return p;
}

}  // namespace ddl
