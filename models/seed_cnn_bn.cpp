// The reference CNN with batch normalisation after each convolution and dropout before the classifier:
// a variant for users who want faster, more stable convergence than the paper's plain network.
//   conv 32 3x3 + BN + ReLU, max-pool 2, conv 64 3x3 + BN + ReLU, max-pool 2, flatten, dense 64 + ReLU,
//   dropout 0.3, dense 10. Convolutions carry no bias (BatchNorm's shift replaces it); He initialisation.
#include "core/layers/batch_norm2d.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/pool2d.hpp"
#include "core/layers/relu.hpp"
#include "models/registry.hpp"

namespace ddl {

std::unique_ptr<Model> seed_cnn_bn(const ModelConfig& config) {
  auto m = std::make_unique<Model>("seed_cnn_bn", dims_t{3, 32, 32}, config.num_classes);
  for (auto [in, out] : {std::pair{3, 32}, std::pair{32, 64}}) {
    m->add(std::make_unique<Conv2d>(Conv2dOptions{
        .in_channels = in, .out_channels = out, .kernel = 3, .padding = 1, .bias = false, .init = Init::he_uniform}));
    m->add(std::make_unique<BatchNorm2d>(BatchNorm2dOptions{.channels = out}));
    m->add(std::make_unique<Relu>());
    m->add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 2, .stride = 2}));
  }
  m->add(std::make_unique<Flatten>());
  m->add(std::make_unique<Dense>(
      DenseOptions{.in_features = 64 * 8 * 8, .out_features = 64, .relu = true, .init = Init::he_uniform}));
  m->add(std::make_unique<Dropout>(0.3f, config.seed));
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = 64, .out_features = config.num_classes}));
  return m;
}

}  // namespace ddl
