// Which layers ddl_train splits across a tensor group (--tensor-split), checked against the model: a
// per-layer property of the layout, so that a planner can later choose it layer by layer.
#pragma once

#include <string>
#include <vector>

#include "core/model.hpp"
#include "core/plan/profile.hpp"

namespace ddl {

struct TensorSplitChoice {
  std::vector<std::size_t> layers;  // indices in the whole model, ascending
  // Dense layers split: each rank brings its own images and the first split layer gathers them.
  // Transformer blocks split: the group shares one batch.
  SplitKind kind = SplitKind::none;
  std::string report;  // for the run's header: what splits, what stays whole and why
};

// option: "classifier" (the dense layers after the last layer of another kind that holds parameters, those
// whose outputs `ranks` divides), "blocks" (every transformer block), or layer indices "9,11" (dense
// layers or transformer blocks, not both). Throws InputError naming --tensor-split for a layer that cannot
// split or does not divide, or when nothing would split.
TensorSplitChoice choose_tensor_split(const std::string& option, Model& whole, int ranks);
// The same check of layers given by index (a planned layout's), `option` naming them in errors.
TensorSplitChoice check_tensor_split(std::vector<std::size_t> layers, Model& whole, int ranks, const std::string& option);

// How layer i of the whole model can split, for the planner: a dense layer (T must divide its outputs), a
// transformer block (its heads, or its MLP's hidden features), or not at all. divisor: what T must divide.
SplitKind split_kind(Model& whole, std::size_t i, int& divisor);

}  // namespace ddl
