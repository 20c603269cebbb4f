// The model of the checkpoint fuzz target and of its seed corpus: a few dozen parameters, so a checkpoint
// is a few KB, yet every kind of state a checkpoint holds. first_layer > 0 makes the pipeline stage that
// starts there.
#pragma once

#include <memory>

#include "core/context.hpp"
#include "core/layers/batch_norm2d.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/flatten.hpp"
#include "core/model.hpp"

namespace ddl::fuzz {

inline std::unique_ptr<Model> checkpoint_model(Context& ctx, std::size_t first_layer) {
  auto m = std::make_unique<Model>("fuzz_tiny", dims_t{1, 2, 2}, 3);
  m->add(std::make_unique<Conv2d>(Conv2dOptions{.in_channels = 1, .out_channels = 2, .kernel = 1}));
  m->add(std::make_unique<BatchNorm2d>(BatchNorm2dOptions{.channels = 2}));
  m->add(std::make_unique<Flatten>());
  m->add(std::make_unique<Dropout>(0.5f, 7));
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = 8, .out_features = 3}));
  if (first_layer > 0) m->keep_layers(first_layer, m->num_layers());
  m->finalize(ctx);
  m->initialize(1);
  return m;
}

}  // namespace ddl::fuzz
