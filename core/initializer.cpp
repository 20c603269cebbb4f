#include "core/initializer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/layers/param_slice.hpp"
#include "core/rng.hpp"

namespace ddl {

namespace {

// Calls put(value) with every value of the parameter's whole array, in order: the same draws whether a
// rank keeps all of them or its part.
template <typename Put>
void draw_whole(const ParamSpec& spec, std::size_t count, std::uint64_t seed, std::size_t index, Put put) {
  Rng rng = Rng::derived(seed, 0x1417, index);
  const double fan_in = static_cast<double>(spec.fan_in), fan_out = static_cast<double>(spec.fan_out);
  auto needs_fans = [&] {
    if (spec.fan_in == 0) throw Error("initializer: parameter " + spec.name + " has no fan-in");
  };
  switch (spec.init) {
    case Init::zeros:
      for (std::size_t i = 0; i < count; ++i) put(0.0f);
      break;
    case Init::ones:
      for (std::size_t i = 0; i < count; ++i) put(1.0f);
      break;
    case Init::glorot_uniform: {
      needs_fans();
      const float limit = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
      for (std::size_t i = 0; i < count; ++i) put(rng.uniform(-limit, limit));
      break;
    }
    case Init::he_uniform: {
      needs_fans();
      const float limit = static_cast<float>(std::sqrt(6.0 / fan_in));
      for (std::size_t i = 0; i < count; ++i) put(rng.uniform(-limit, limit));
      break;
    }
    case Init::he_normal: {
      needs_fans();
      const float stddev = static_cast<float>(std::sqrt(2.0 / fan_in));
      for (std::size_t i = 0; i < count; ++i) put(stddev * rng.normal());
      break;
    }
    case Init::normal_002:
      for (std::size_t i = 0; i < count; ++i) put(0.02f * rng.normal());
      break;
  }
}

}  // namespace

void initialize_param(const ParamSpec& spec, std::span<float> values, std::uint64_t seed, std::size_t index) {
  auto out = values.begin();
  draw_whole(spec, values.size(), seed, index, [&](float v) { *out++ = v; });
}

void initialize_part(const ParamSpec& spec, std::span<float> values, std::uint64_t seed, std::size_t index) {
  // Position by position through the whole array, keeping what falls in this rank's runs.
  const std::vector<SliceRun> runs = slice_runs(spec);
  std::size_t position = 0, run = 0, block = 0;
  draw_whole(spec, whole_size(spec), seed, index, [&](float v) {
    while (run < runs.size()) {
      const SliceRun& r = runs[run];
      const std::size_t start = r.whole_offset + block * r.stride;
      if (position < start) break;
      if (position < start + r.count) {
        values[r.offset + block * r.count + (position - start)] = v;
        break;
      }
      if (++block == r.blocks) {
        block = 0;
        ++run;
      }
    }
    ++position;
  });
}

}  // namespace ddl
