#include "launch/tensor_split.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/layers/attention.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/linear.hpp"
#include "core/layers/residual.hpp"

namespace ddl {
namespace {

const Dense* dense_at(Model& model, std::size_t i) { return dynamic_cast<const Dense*>(&model.layer(i)); }

bool holds_linear(Sequential& s) {
  for (auto& part : s.parts()) {
    auto* inner = dynamic_cast<Sequential*>(part.get());
    if (dynamic_cast<Linear*>(part.get()) || (inner && holds_linear(*inner))) return true;
  }
  return false;
}

// What a group splitting a block must divide: its attention's heads, else its first linear layer's outputs.
int block_divisor(Sequential& s) {
  for (auto& part : s.parts()) {
    if (auto* attention = dynamic_cast<ScaledDotProductAttention*>(part.get())) return attention->heads();
    if (auto* inner = dynamic_cast<Sequential*>(part.get()))
      if (const int d = block_divisor(*inner)) return d;
  }
  for (auto& part : s.parts())
    if (auto* linear = dynamic_cast<Linear*>(part.get())) return linear->options().out_features;
  return 0;
}

// A residual block of linear layers (a transformer's attention or MLP), not of convolutions.
bool transformer_block_at(Model& model, std::size_t i) {
  auto* block = dynamic_cast<Residual*>(&model.layer(i));
  return block && holds_linear(block->body());
}

std::vector<std::size_t> parse_indices(const std::string& text) {
  std::vector<std::size_t> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos)
      throw InputError("--tensor-split must be classifier, blocks or layer indices such as 9,11, not '" + text + "'");
    out.push_back(std::stoul(item));
    at = comma + 1;
  }
  return out;
}

// "split across 2 ranks: layers 9 (...), 11 (...); the group's batch is gathered at layer 9", and the
// layers that stay whole (`kept`).
std::string split_report(const TensorSplitChoice& choice, Model& whole, int ranks, const std::string& kept) {
  std::string report = "split across " + std::to_string(ranks) + " ranks: layer";
  report += choice.layers.size() > 1 ? "s " : " ";
  for (std::size_t k = 0; k < choice.layers.size(); ++k)
    report += (k ? ", " : "") + std::to_string(choice.layers[k]) + " (" + whole.layer(choice.layers[k]).describe() + ")";
  if (choice.kind == SplitKind::dense)
    report += "; the group's batch is gathered at layer " + std::to_string(choice.layers.front());
  else
    report += "; the group shares one batch";
  if (!kept.empty()) report += "; whole on every rank: " + kept + ", which " + std::to_string(ranks) + " does not divide";
  return report;
}

}  // namespace

TensorSplitChoice choose_tensor_split(const std::string& option, Model& whole, int ranks) {
  Layout group;
  group.tensor = ranks;
  TensorSplitChoice choice;
  int divisor = 0;
  std::string kept;
  if (option == "classifier") {
    std::size_t begin = 0;
    for (std::size_t i = 0; i < whole.num_layers(); ++i)
      if (!dense_at(whole, i) && whole.layer_param_count(i) > 0) begin = i + 1;
    for (std::size_t i = begin; i < whole.num_layers(); ++i) {
      if (split_kind(whole, i, divisor) != SplitKind::dense) continue;
      if (group.may_split(SplitKind::dense, divisor))
        choice.layers.push_back(i);
      else
        kept += (kept.empty() ? "" : ", ") + std::to_string(i) + " (" + std::to_string(divisor) + " outputs)";
    }
    if (choice.layers.empty())
      throw InputError("--tensor-split classifier: model " + whole.name() + " has no dense layer after its last " +
                       "layer of another kind with parameters whose outputs " + std::to_string(ranks) +
                       " ranks divide" + (kept.empty() ? "" : ": " + kept) +
                       (whole.name().rfind("vit", 0) == 0 ? " (try --tensor-split blocks)" : ""));
    choice.kind = SplitKind::dense;
  } else if (option == "blocks") {
    for (std::size_t i = 0; i < whole.num_layers(); ++i)
      if (transformer_block_at(whole, i)) choice.layers.push_back(i);
    if (choice.layers.empty())
      throw InputError("--tensor-split blocks: model " + whole.name() + " has no transformer blocks (try classifier)");
    choice.kind = SplitKind::block;
  } else {
    return check_tensor_split(parse_indices(option), whole, ranks, option);
  }
  choice.report = split_report(choice, whole, ranks, kept);
  return choice;
}

TensorSplitChoice check_tensor_split(std::vector<std::size_t> layers, Model& whole, int ranks, const std::string& option) {
  Layout group;
  group.tensor = ranks;
  TensorSplitChoice choice;
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  bool blocks = false, dense = false;
  for (const std::size_t i : layers) {
    if (i >= whole.num_layers())
      throw InputError("--tensor-split " + option + ": model " + whole.name() + " has layers 0-" +
                       std::to_string(whole.num_layers() - 1));
    int divisor = 0;
    const SplitKind kind = split_kind(whole, i, divisor);
    if (kind == SplitKind::none)
      throw InputError("--tensor-split " + option + ": layer " + std::to_string(i) + " of " + whole.name() + " (" +
                       whole.layer(i).describe() + ") is neither a dense layer nor a transformer block");
    if (kind == SplitKind::dense && !group.may_split(kind, divisor))
      throw InputError("--tensor-split " + option + ": --tensor-parallel " + std::to_string(ranks) +
                       " does not divide the " + std::to_string(divisor) + " outputs of layer " + std::to_string(i));
    blocks = blocks || kind == SplitKind::block;
    dense = dense || kind == SplitKind::dense;
  }
  if (blocks && dense)
    throw InputError("--tensor-split " + option + ": split dense layers (each rank brings its own images) or "
                     "transformer blocks (the group shares its images), not both");
  choice.layers = std::move(layers);
  choice.kind = dense ? SplitKind::dense : SplitKind::block;
  choice.report = split_report(choice, whole, ranks, "");
  return choice;
}

SplitKind split_kind(Model& whole, std::size_t i, int& divisor) {
  divisor = 0;
  if (const Dense* dense = dense_at(whole, i)) {
    divisor = dense->options().out_features;
    return SplitKind::dense;
  }
  if (transformer_block_at(whole, i)) {
    divisor = block_divisor(dynamic_cast<Residual&>(whole.layer(i)).body());
    return SplitKind::block;
  }
  return SplitKind::none;
}

}  // namespace ddl
