#include "core/initializer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace ddl {

void initialize_param(const ParamSpec& spec, std::span<float> values, std::uint64_t seed, std::size_t index) {
  Rng rng = Rng::derived(seed, 0x1417, index);
  const double fan_in = static_cast<double>(spec.fan_in), fan_out = static_cast<double>(spec.fan_out);
  auto needs_fans = [&] {
    if (spec.fan_in == 0) throw Error("initializer: parameter " + spec.name + " has no fan-in");
  };
  switch (spec.init) {
    case Init::zeros:
      std::fill(values.begin(), values.end(), 0.0f);
      break;
    case Init::ones:
      std::fill(values.begin(), values.end(), 1.0f);
      break;
    case Init::glorot_uniform: {
      needs_fans();
      const float limit = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
      for (auto& v : values) v = rng.uniform(-limit, limit);
      break;
    }
    case Init::he_uniform: {
      needs_fans();
      const float limit = static_cast<float>(std::sqrt(6.0 / fan_in));
      for (auto& v : values) v = rng.uniform(-limit, limit);
      break;
    }
    case Init::he_normal: {
      needs_fans();
      const float stddev = static_cast<float>(std::sqrt(2.0 / fan_in));
      for (auto& v : values) v = stddev * rng.normal();
      break;
    }
    case Init::normal_002:
      for (auto& v : values) v = 0.02f * rng.normal();
      break;
  }
}

}  // namespace ddl
