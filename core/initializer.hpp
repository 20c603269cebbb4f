// Parameter initialisers: Glorot-uniform (Keras's default, which the reference paper used), He-uniform and
// He-normal (for ReLU networks), zeros and ones. Each parameter array draws from its own generator derived
// from (seed, index), so the values do not depend on what else the model holds.
#pragma once

#include <cstdint>
#include <span>

#include "core/layers/layer.hpp"

namespace ddl {

void initialize_param(const ParamSpec& spec, std::span<float> values, std::uint64_t seed, std::size_t index);
// A rank's part of a split parameter (ParamSpec's whole_dims): the values the whole array would hold
// there, without holding the whole array.
void initialize_part(const ParamSpec& spec, std::span<float> values, std::uint64_t seed, std::size_t index);

}  // namespace ddl
