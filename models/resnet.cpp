// Residual networks (He et al., 2016) as torchvision defines them (v1.5: a bottleneck's stride sits on its
// 3x3 convolution):
//   resnet18: basic blocks [2, 2, 2, 2] (two 3x3 convolutions), 11,689,512 parameters at 1,000 classes;
//   resnet50: bottleneck blocks [3, 4, 6, 3] (1x1, 3x3, 1x1 with 4x expansion), 25,557,032 parameters.
// The ImageNet stem is a 7x7/2 convolution and a 3x3/2 max-pool (224x224 input); the CIFAR stem
// (the *_cifar models, 32x32 input) is one 3x3/1 convolution and no pool. Every convolution is followed
// by BatchNorm (ReLU fused into it where one follows); a block's shortcut is the identity, or a 1x1 convolution + BatchNorm where the shape changes;
// the ReLU after the sum is fused into it. Global average pooling, then one dense layer.
#include "core/layers/batch_norm2d.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/pool2d.hpp"
#include "core/layers/residual.hpp"
#include "models/registry.hpp"

namespace ddl {
namespace {

enum class Block { basic, bottleneck };
enum class Stem { imagenet, cifar };

void conv_bn(Sequential& s, int in, int out, int kernel, int stride, bool relu) {
  s.emplace<Conv2d>(Conv2dOptions{.in_channels = in, .out_channels = out, .kernel = kernel, .stride = stride,
                                  .padding = kernel / 2, .bias = false, .init = Init::he_normal});
  s.emplace<BatchNorm2d>(BatchNorm2dOptions{.channels = out, .relu = relu});
}

std::unique_ptr<Layer> block(Block kind, int in, int width, int stride) {
  const int out = kind == Block::basic ? width : 4 * width;
  Sequential body;
  if (kind == Block::basic) {
    conv_bn(body, in, width, 3, stride, true);
    conv_bn(body, width, width, 3, 1, false);
  } else {
    conv_bn(body, in, width, 1, 1, true);
    conv_bn(body, width, width, 3, stride, true);
    conv_bn(body, width, out, 1, 1, false);
  }
  Sequential shortcut;
  if (stride != 1 || in != out) conv_bn(shortcut, in, out, 1, stride, false);
  const std::string name = std::string(kind == Block::basic ? "basic block " : "bottleneck ") + std::to_string(in) +
                           "->" + std::to_string(out) + (stride > 1 ? " /" + std::to_string(stride) : "");
  return std::make_unique<Residual>(name, std::move(body), std::move(shortcut), true);
}

std::unique_ptr<Model> build(const char* name, Block kind, const std::vector<int>& blocks, Stem stem,
                             const ModelConfig& config) {
  const int size = chosen(config.image_size, stem == Stem::imagenet ? 224 : 32);
  if (size < (stem == Stem::imagenet ? 64 : 16))
    throw InputError(std::string(name) + ": images of " + std::to_string(size) + " pixels are too small");
  auto m = std::make_unique<Model>(name, dims_t{3, size, size}, config.num_classes);
  Sequential first("stem");
  if (stem == Stem::imagenet) {
    conv_bn(first, 3, 64, 7, 2, true);
    first.emplace<Pool2d>(Pool2dOptions{.kind = PoolKind::max, .kernel = 3, .stride = 2, .padding = 1});
  } else {
    conv_bn(first, 3, 64, 3, 1, true);
  }
  m->add(std::make_unique<Sequential>(std::move(first)));
  int in = 64;
  for (std::size_t stage = 0; stage < blocks.size(); ++stage) {
    const int width = 64 << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      m->add(block(kind, in, width, b == 0 && stage > 0 ? 2 : 1));
      in = kind == Block::basic ? width : 4 * width;
    }
  }
  m->add(std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::global_avg}));
  m->add(std::make_unique<Flatten>());
  m->add(std::make_unique<Dense>(DenseOptions{.in_features = in, .out_features = config.num_classes}));
  return m;
}

}  // namespace

std::unique_ptr<Model> resnet18(const ModelConfig& c) { return build("resnet18", Block::basic, {2, 2, 2, 2}, Stem::imagenet, c); }
std::unique_ptr<Model> resnet18_cifar(const ModelConfig& c) {
  return build("resnet18_cifar", Block::basic, {2, 2, 2, 2}, Stem::cifar, c);
}
std::unique_ptr<Model> resnet50(const ModelConfig& c) {
  return build("resnet50", Block::bottleneck, {3, 4, 6, 3}, Stem::imagenet, c);
}
std::unique_ptr<Model> resnet50_cifar(const ModelConfig& c) {
  return build("resnet50_cifar", Block::bottleneck, {3, 4, 6, 3}, Stem::cifar, c);
}

}  // namespace ddl
