// The reference CNN of Abdulkarim et al., "Optimizing Training Time in Deep Learning Models Using
// Distributed Computing Techniques" (2026), for 32x32 RGB images:
//   conv 32 3x3 same + ReLU, max-pool 2, conv 64 3x3 same + ReLU, max-pool 2, flatten, dense 64 + ReLU,
//   dense 10 (softmax is part of the loss). Glorot-uniform weights and zero biases, as Keras initialises
//   them. 282,250 parameters at 10 classes.
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/pool2d.hpp"
#include "models/registry.hpp"

namespace ddl {

std::unique_ptr<Model> seed_cnn(const ModelConfig& config) {
  auto m = std::make_unique<Model>("seed_cnn", dims_t{3, 32, 32}, config.num_classes);
  m->add(std::make_unique<Conv2d>(
      Conv2dOptions{.in_channels = 3, .out_channels = 32, .kernel = 3, .padding = 1, .relu = true}));
  m->add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 2, .stride = 2}));
  m->add(std::make_unique<Conv2d>(
      Conv2dOptions{.in_channels = 32, .out_channels = 64, .kernel = 3, .padding = 1, .relu = true}));
  m->add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 2, .stride = 2}));
  m->add(std::make_unique<Flatten>());
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = 64 * 8 * 8, .out_features = 64, .relu = true}));
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = 64, .out_features = config.num_classes}));
  return m;
}

}  // namespace ddl
