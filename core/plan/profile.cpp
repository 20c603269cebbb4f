#include "core/plan/profile.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <tuple>

#include "core/error.hpp"

namespace ddl {
namespace {

const char* kinds[] = {"none", "dense", "block"};

SplitKind kind_named(const std::string& name, const std::string& where) {
  for (int k = 0; k < 3; ++k)
    if (name == kinds[k]) return static_cast<SplitKind>(k);
  throw InputError(where + ": split kind '" + name + "' is none of none, dense, block");
}

// The figures a profile's text form gives a line of their own, one per layer, written where measured, and
// the most each may be.
struct PerLayerLine {
  const char* key;
  double LayerCost::*figure;
  double most;
};
constexpr std::array<PerLayerLine, 4> kPerLayerLines{{{"whole_share", &LayerCost::whole_share, 1},
                                                      {"one_image_seconds", &LayerCost::one_image_seconds, 1e30},
                                                      {"kept_with_previous", &LayerCost::kept_with_previous, 1},
                                                      {"side_bytes", &LayerCost::side_bytes, 1e30}}};

}  // namespace

double LayerCost::call_seconds(double images, int batch) const {
  const double quarter = std::max(1, batch / 4);  // as the probe times it
  if (one_image_seconds <= 0 || quarter <= 1 || images >= quarter) return fixed_seconds + images * seconds;
  const double at_quarter = fixed_seconds + quarter * seconds;
  return one_image_seconds + (std::max(images, 1.0) - 1) * (at_quarter - one_image_seconds) / (quarter - 1);
}

void LayerCost::scale(double factor) {
  for (const auto figure : kLayerTimes) this->*figure *= factor;
}

double whole_share_of(const LayerCost& whole, double rows, double split_seconds) {
  const double images_seconds = whole.seconds * rows;  // a call on T ranks: (whole + (1 - whole) / T) of it
  return images_seconds > 0 ? 2 * (split_seconds - whole.fixed_seconds) / images_seconds - 1 : 0;
}

double Link::interpolated(const std::vector<Timing>& timings, double bytes) const {
  const auto line = [&](const Timing& from) { return from.seconds + (bytes - from.bytes) / bytes_per_s; };
  if (timings.empty()) return line({0, latency_s});
  if (bytes <= timings.front().bytes) return timings.front().seconds;
  if (bytes >= timings.back().bytes) return line(timings.back());
  std::size_t i = 1;
  while (timings[i].bytes < bytes) ++i;
  const Timing &a = timings[i - 1], &b = timings[i];
  return a.seconds + (b.seconds - a.seconds) * (bytes - a.bytes) / (b.bytes - a.bytes);
}

Link Link::slowed(double factor) const {
  Link link = *this;
  link.latency_s *= factor;
  link.bytes_per_s /= factor;
  for (auto* timings : {&link.ring_steps, &link.messages})
    for (Timing& t : *timings) t.seconds *= factor;
  return link;
}

Link Link::extended_by(const Link& before) const {
  Link link = *this;
  double bandwidth_scale = 1;
  for (auto [now, then, timed] : {std::tuple{&link.ring_steps, &before.ring_steps, &Link::ring_step_s},
                                  std::tuple{&link.messages, &before.messages, &Link::message_s}}) {
    if (now->empty() || then->empty() || then->back().bytes <= now->back().bytes) continue;
    const double largest = now->back().bytes;
    const double scale = now->back().seconds / (before.*timed)(largest);
    for (const Timing& t : *then)
      if (t.bytes > largest) now->push_back({t.bytes, std::max(now->back().seconds, scale * t.seconds)});
    if (now == &link.ring_steps) bandwidth_scale = scale;
  }
  if (link.ring_steps.size() > ring_steps.size()) link.bytes_per_s = before.bytes_per_s / bandwidth_scale;
  return link;
}

namespace {

std::string bytes_text(double bytes) {
  char text[32];
  if (bytes >= 1 << 20) std::snprintf(text, sizeof text, "%.0f MB", bytes / (1 << 20));
  else std::snprintf(text, sizeof text, "%.0f KB", bytes / 1024);
  return text;
}

std::string timings_text(const char* what, const std::vector<Timing>& timings) {
  if (timings.empty()) return "";
  char text[96];
  std::snprintf(text, sizeof text, "; %s %.0f us at %s, %.0f us at %s", what, 1e6 * timings.front().seconds,
                bytes_text(timings.front().bytes).c_str(), 1e6 * timings.back().seconds,
                bytes_text(timings.back().bytes).c_str());
  return text;
}

// A profile's links by the names its text form gives them (const or not, as the profile is).
template <class P>
auto links_of(P& p) {
  return std::array{std::pair{std::string("within_node"), &p.within_node},
                    std::pair{std::string("between_nodes"), &p.between_nodes}};
}

// A link's timings by the suffixes its text form's lines add to the link's name.
template <class L>
auto ways_of(L& link) {
  return std::array{std::pair{std::string("_ring_steps"), &link.ring_steps},
                    std::pair{std::string("_messages"), &link.messages}};
}

// The timings a profile line's key names ("within_node_ring_steps"), or null.
std::vector<Timing>* timings_named(Profile& p, const std::string& key) {
  for (auto [name, link] : links_of(p))
    for (auto [way, timings] : ways_of(*link))
      if (key == name + way) return timings;
  return nullptr;
}

}  // namespace

std::string Link::describe() const {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f us + %.3g GB/s", 1e6 * latency_s, bytes_per_s / 1e9);
  return text + timings_text("ring step", ring_steps) + timings_text("message", messages);
}

double layers_seconds(const Profile& profile) {
  double seconds = 0;
  for (const LayerCost& l : profile.layers) seconds += l.call_seconds(profile.batch, profile.batch);
  return seconds;
}

Profile at_pace(const Profile& profile, double seconds) {
  const double now = layers_seconds(profile);
  if (now <= 0) return profile;
  Profile paced = profile;
  for (LayerCost& l : paced.layers) l.scale(seconds / now);
  return paced;
}

std::string to_text(const Profile& p) {
  std::ostringstream s;
  s << std::setprecision(9);
  s << "ddl-profile 1\nmodel " << p.model << "\nbatch " << p.batch << "\noptimizer_s_per_param "
    << p.optimizer_s_per_param << "\noptimizer_floats " << p.optimizer_floats << "\nbase_bytes " << p.base_bytes << "\nmeasured_bytes " << p.measured_bytes
    << "\n";
  if (p.gather_extra_s > 0) s << "gather_extra_s " << p.gather_extra_s << "\n";
  for (auto [key, link] : links_of(p)) {
    s << key << " " << link->latency_s << " " << link->bytes_per_s << "\n";
    for (auto [way, timings] : ways_of(*link)) {
      if (timings->empty()) continue;
      s << key << way;
      for (const Timing& t : *timings) s << " " << t.bytes << " " << t.seconds;
      s << "\n";
    }
  }
  // The name last: it holds spaces.
  for (const auto& l : p.layers)
    s << "layer " << l.seconds << " " << l.params << " " << l.input_bytes << " " << l.output_bytes << " "
      << kinds[static_cast<int>(l.split)] << " " << l.divisor << " " << l.fixed_seconds << " " << l.name << "\n";
  // Where measured: a profile written before they were reads as all 0.
  for (const auto& [key, figure, most] : kPerLayerLines) {
    if (std::none_of(p.layers.begin(), p.layers.end(), [&](const LayerCost& l) { return l.*figure > 0; })) continue;
    s << key;
    for (const auto& l : p.layers) s << " " << l.*figure;
    s << "\n";
  }
  return s.str();
}

namespace {

// A time, size or count as a profile holds it: finite and not negative.
bool measure(double x) { return std::isfinite(x) && x >= 0; }

// The profile's figures of one number a line each.
struct FigureLine {
  const char* key;
  double Profile::*figure;
};
constexpr std::array<FigureLine, 5> kFigureLines{{{"optimizer_s_per_param", &Profile::optimizer_s_per_param},
                                                  {"optimizer_floats", &Profile::optimizer_floats},
                                                  {"base_bytes", &Profile::base_bytes},
                                                  {"measured_bytes", &Profile::measured_bytes},
                                                  {"gather_extra_s", &Profile::gather_extra_s}}};

// Sizes and times in pairs, sizes rising and times never falling.
bool read_timings(std::istringstream& in, std::vector<Timing>& timings) {
  std::vector<double> numbers;
  for (double x; in >> x;) numbers.push_back(x);
  bool ok = in.eof() && !numbers.empty() && numbers.size() % 2 == 0;
  timings.clear();
  for (std::size_t i = 0; ok && i < numbers.size(); i += 2) {
    const Timing t{numbers[i], numbers[i + 1]};
    ok = t.bytes > 0 && t.seconds > 0 &&
         (timings.empty() || (t.bytes > timings.back().bytes && t.seconds >= timings.back().seconds));
    timings.push_back(t);
  }
  return ok;
}

bool read_layer(std::istringstream& in, const std::string& where, Profile& p) {
  LayerCost l;
  std::string kind;
  bool ok = static_cast<bool>(in >> l.seconds >> l.params >> l.input_bytes >> l.output_bytes >> kind >> l.divisor >>
                              l.fixed_seconds) &&
            measure(l.seconds) && measure(l.params) && measure(l.input_bytes) && measure(l.output_bytes) &&
            measure(l.fixed_seconds) && l.divisor >= 0;
  if (ok) {
    l.split = kind_named(kind, where);
    // A layer that splits is split by what divides its outputs or heads.
    ok = l.split == SplitKind::none || l.divisor > 0;
  }
  if (ok) {
    std::getline(in >> std::ws, l.name);
    p.layers.push_back(l);
  }
  return ok;
}

// One line after the header, by its key; false where its figures cannot be read. `per_layer` takes the lines
// of a figure for every layer, set once the layers are all read.
bool read_line(const std::string& key, std::istringstream& in, const std::string& where, Profile& p,
               std::vector<std::vector<double>>& per_layer) {
  const auto figure = std::find_if(kFigureLines.begin(), kFigureLines.end(),
                                   [&](const FigureLine& l) { return key == l.key; });
  if (figure != kFigureLines.end()) {
    double& x = p.*(figure->figure);
    return static_cast<bool>(in >> x) && measure(x);
  }
  if (key == "model") return static_cast<bool>(in >> p.model);
  if (key == "batch") return static_cast<bool>(in >> p.batch) && p.batch > 0;
  if (key == "within_node" || key == "between_nodes") {
    Link& link = key == "within_node" ? p.within_node : p.between_nodes;
    return static_cast<bool>(in >> link.latency_s >> link.bytes_per_s) && link.bytes_per_s > 0 && link.latency_s >= 0;
  }
  if (std::vector<Timing>* timings = timings_named(p, key)) return read_timings(in, *timings);
  if (key == "layer") return read_layer(in, where, p);
  const auto named = std::find_if(kPerLayerLines.begin(), kPerLayerLines.end(),
                                  [&](const PerLayerLine& l) { return key == l.key; });
  if (named == kPerLayerLines.end()) throw InputError(where + ": unknown key '" + key + "'");
  std::vector<double>& figures = per_layer[static_cast<std::size_t>(named - kPerLayerLines.begin())];
  for (double x; in >> x;) figures.push_back(x);
  return in.eof() && std::all_of(figures.begin(), figures.end(), [&](double x) { return x >= 0 && x <= named->most; });
}

}  // namespace

Profile profile_from_text(const std::string& text, const std::string& source) {
  Profile p;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  bool header = false;
  std::vector<std::vector<double>> per_layer(kPerLayerLines.size());  // read after the layers
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
    } else {
      ok = read_line(key, in, where, p, per_layer);
    }
    if (!ok) throw InputError(where + ": cannot read '" + line + "'");
  }
  if (!header || p.layers.empty() || p.batch <= 0)
    throw InputError(source + ": a profile needs its 'ddl-profile 1' line, a batch and at least one layer");
  for (std::size_t k = 0; k < kPerLayerLines.size(); ++k) {
    const auto& [key, figure, most] = kPerLayerLines[k];
    if (!per_layer[k].empty() && per_layer[k].size() != p.layers.size())
      throw InputError(source + ": its " + key + " line has " + std::to_string(per_layer[k].size()) +
                       " figures for " + std::to_string(p.layers.size()) + " layers");
    for (std::size_t i = 0; i < per_layer[k].size(); ++i) p.layers[i].*figure = per_layer[k][i];
  }
  return p;
}

}  // namespace ddl
