// Vision transformer (Dosovitskiy et al., 2021) as torchvision defines it, pre-norm:
//   patch embedding (a patch x patch convolution at stride patch) -> tokens, a learned class token in front,
//   learned position embedding; L blocks of  x += MHSA(LN(x)),  x += MLP(LN(x))  with MLP = linear 4D, GELU,
//   linear D; a final LayerNorm; the class token through one dense layer.
//   vit_b16: 224x224, patch 16, D 768, 12 blocks, 12 heads: 86,567,656 parameters at 1,000 classes.
//   vit_tiny: 32x32, patch 4, D 64, 2 blocks, 4 heads, for quick runs and tests.
// Image size, patch size, depth, width and heads can all be changed (ModelConfig); dropout (after the
// embedding, on the attention weights, in the MLP) defaults to 0 as in torchvision.
#include "core/layers/attention.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/elementwise.hpp"
#include "core/layers/layer_norm.hpp"
#include "core/layers/linear.hpp"
#include "core/layers/residual.hpp"
#include "core/layers/tokens.hpp"
#include "models/registry.hpp"

namespace ddl {
namespace {

struct VitShape {
  int image_size, patch_size, depth, width, heads;
};

std::unique_ptr<Model> build(const char* name, const VitShape& defaults, const ModelConfig& config) {
  const int size = chosen(config.image_size, defaults.image_size), patch = chosen(config.patch_size, defaults.patch_size);
  const int depth = chosen(config.depth, defaults.depth), d = chosen(config.width, defaults.width);
  const int heads = chosen(config.heads, defaults.heads);
  if (size % patch != 0)
    throw InputError(std::string(name) + ": image size " + std::to_string(size) + " is not a multiple of the patch size " +
                     std::to_string(patch));
  if (d % heads != 0)
    throw InputError(std::string(name) + ": width " + std::to_string(d) + " is not a multiple of " +
                     std::to_string(heads) + " heads");
  const float p = chosen_dropout(config, 0.0f);
  std::uint64_t random_layers = 0;
  auto dropout = [&](Sequential& s) {
    if (p > 0.0f) s.emplace<Dropout>(p, layer_seed(config, random_layers++));
  };

  auto m = std::make_unique<Model>(name, dims_t{3, size, size}, config.num_classes);
  const int tokens = (size / patch) * (size / patch);
  Sequential embed("patch embedding " + std::to_string(patch) + "x" + std::to_string(patch) + " -> " +
                   std::to_string(tokens + 1) + " tokens");
  embed.emplace<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = d, .kernel = patch, .stride = patch});
  embed.emplace<ImageToTokens>();
  embed.emplace<ClassTokenAndPosition>(tokens, d);
  dropout(embed);
  m->add(std::make_unique<Sequential>(std::move(embed)));
  for (int layer = 0; layer < depth; ++layer) {
    Sequential attention;
    attention.emplace<LayerNorm>(LayerNormOptions{.features = d});
    attention.add(multi_head_self_attention(d, heads, p, layer_seed(config, random_layers++)));
    dropout(attention);
    m->add(std::make_unique<Residual>("encoder " + std::to_string(layer) + " attention", std::move(attention)));
    Sequential mlp;
    mlp.emplace<LayerNorm>(LayerNormOptions{.features = d});
    mlp.emplace<Linear>(LinearOptions{.in_features = d, .out_features = 4 * d});
    mlp.emplace<Gelu>();
    dropout(mlp);
    mlp.emplace<Linear>(LinearOptions{.in_features = 4 * d, .out_features = d});
    dropout(mlp);
    m->add(std::make_unique<Residual>("encoder " + std::to_string(layer) + " mlp", std::move(mlp)));
  }
  m->add(std::make_unique<LayerNorm>(LayerNormOptions{.features = d}));
  m->add(std::make_unique<TakeClassToken>());
  m->add(std::make_unique<Linear>(LinearOptions{.in_features = d, .out_features = config.num_classes}));
  return m;
}

}  // namespace

std::unique_ptr<Model> vit_b16(const ModelConfig& config) { return build("vit_b16", {224, 16, 12, 768, 12}, config); }
std::unique_ptr<Model> vit_tiny(const ModelConfig& config) { return build("vit_tiny", {32, 4, 2, 64, 4}, config); }

}  // namespace ddl
