// VGG16 (Simonyan and Zisserman, 2015), configuration D as torchvision defines it (without BatchNorm):
// thirteen 3x3 convolutions in five stages of 64, 128, 256, 512, 512 channels, each stage ending in a 2x2
// max-pool, then dense 4096, dropout, dense 4096, dropout, dense classes. 138,357,544 parameters at 1,000
// classes and 224x224 (7x7x512 features). vgg16_cifar: the same convolutions on 32x32 images (1x1x512
// features) with a 512-wide classifier.
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/pool2d.hpp"
#include "models/registry.hpp"

namespace ddl {
namespace {

std::unique_ptr<Model> build(const char* name, int hidden, int default_size, const ModelConfig& config) {
  const int size = chosen(config.image_size, default_size);
  if (size % 32 != 0) throw InputError(std::string(name) + ": the image size must be a multiple of 32");
  auto m = std::make_unique<Model>(name, dims_t{3, size, size}, config.num_classes);
  int in = 3;
  for (auto [channels, convs] : {std::pair{64, 2}, {128, 2}, {256, 3}, {512, 3}, {512, 3}}) {
    for (int i = 0; i < convs; ++i, in = channels)
      m->add(std::make_unique<Conv2d>(Conv2dOptions{.in_channels = in, .out_channels = channels, .kernel = 3,
                                                    .padding = 1, .relu = true, .init = Init::he_uniform}));
    m->add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 2, .stride = 2}));
  }
  const int side = size / 32;
  const float p = chosen_dropout(config, 0.5f);
  m->add(std::make_unique<Flatten>());
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = 512 * side * side, .out_features = hidden, .relu = true}));
  m->add(std::make_unique<Dropout>(p, layer_seed(config, 0)));
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = hidden, .out_features = hidden, .relu = true}));
  m->add(std::make_unique<Dropout>(p, layer_seed(config, 1)));
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = hidden, .out_features = config.num_classes}));
  return m;
}

}  // namespace

std::unique_ptr<Model> vgg16(const ModelConfig& config) { return build("vgg16", 4096, 224, config); }
std::unique_ptr<Model> vgg16_cifar(const ModelConfig& config) { return build("vgg16_cifar", 512, 32, config); }

}  // namespace ddl
