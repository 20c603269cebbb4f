// AlexNet (Krizhevsky et al., 2012) as torchvision defines it (the single-tower variant Lerat et al. train, 2022):
//   conv 64 11x11/4 p2, max-pool 3/2, conv 192 5x5 p2, max-pool 3/2, conv 384, 256, 256 3x3 p1,
//   max-pool 3/2, dropout, dense 4096, dropout, dense 4096, dense classes; ReLU after every conv and
//   hidden dense. 61,100,840 parameters at 1,000 classes and 224x224 (6x6x256 features).
// alexnet_cifar keeps the five-conv, three-dense shape for 32x32 images: 5x5 first convolutions at
// stride 1 and a 1024-wide classifier (3x3x256 features).
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/pool2d.hpp"
#include "models/registry.hpp"

namespace ddl {
namespace {

struct AlexNetShape {
  int first_kernel, first_stride, first_padding, second_kernel, hidden;
};

int pooled(int size) { return (size - 3) / 2 + 1; }

std::unique_ptr<Model> build(const char* name, const AlexNetShape& a, int default_size, const ModelConfig& config) {
  const int size = chosen(config.image_size, default_size);
  auto m = std::make_unique<Model>(name, dims_t{3, size, size}, config.num_classes);
  auto conv = [&](int in, int out, int kernel, int stride, int padding) {
    m->add(std::make_unique<Conv2d>(Conv2dOptions{.in_channels = in, .out_channels = out, .kernel = kernel,
                                                  .stride = stride, .padding = padding, .relu = true,
                                                  .init = Init::he_uniform}));
  };
  auto pool = [&] { m->add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 3, .stride = 2})); };
  conv(3, 64, a.first_kernel, a.first_stride, a.first_padding);
  pool();
  conv(64, 192, a.second_kernel, 1, a.second_kernel / 2);
  pool();
  conv(192, 384, 3, 1, 1);
  conv(384, 256, 3, 1, 1);
  conv(256, 256, 3, 1, 1);
  pool();
  const int first = (size + 2 * a.first_padding - a.first_kernel) / a.first_stride + 1;
  const int side = pooled(pooled(pooled(first)));
  if (side < 1) throw InputError(std::string(name) + ": images of " + std::to_string(size) + " pixels are too small");
  const float p = chosen_dropout(config, 0.5f);
  m->add(std::make_unique<Flatten>());
  m->add(std::make_unique<Dropout>(p, layer_seed(config, 0)));
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = 256 * side * side, .out_features = a.hidden, .relu = true}));
  m->add(std::make_unique<Dropout>(p, layer_seed(config, 1)));
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = a.hidden, .out_features = a.hidden, .relu = true}));
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = a.hidden, .out_features = config.num_classes}));
  return m;
}

}  // namespace

std::unique_ptr<Model> alexnet(const ModelConfig& config) { return build("alexnet", {11, 4, 2, 5, 4096}, 224, config); }

std::unique_ptr<Model> alexnet_cifar(const ModelConfig& config) {
  return build("alexnet_cifar", {5, 1, 2, 5, 1024}, 32, config);
}

}  // namespace ddl
