#include "models/onnx/fuse_patterns.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "models/onnx/message_text.hpp"

namespace ddl::onnx {
namespace {

// The node that alone reads `value` (nullptr where none or several do) and, where `op` is given, is one.
const Node* only_reader(const Graph& g, const std::map<std::string, std::vector<std::size_t>>& readers,
                        const std::string& value, const std::string& op) {
  const auto it = readers.find(value);
  if (it == readers.end() || it->second.size() != 1 || value == g.output) return nullptr;
  const Node* n = &g.nodes[it->second[0]];
  return n->op == op && !n->outputs.empty() && !n->outputs[0].empty() ? n : nullptr;
}

// The one number of a constant scalar input, if it is one (of rank 0 or 1: one of higher rank would broadcast
// the result to its rank, which a fused node would not).
std::optional<float> scalar(const Graph& g, const std::string& value) {
  const auto it = g.constants.find(value);
  if (it == g.constants.end() || it->second.size() != 1 || it->second.dims.size() > 1) return std::nullopt;
  return it->second.integer ? static_cast<float>(it->second.ints[0]) : it->second.floats[0];
}

// The nodes that read each value, and the node that computes each first output.
struct Index {
  std::map<std::string, std::vector<std::size_t>> readers;
  std::map<std::string, std::size_t> position;
  explicit Index(const Graph& g) {
    for (std::size_t n = 0; n < g.nodes.size(); ++n) {
      for (const std::string& in : g.nodes[n].inputs)
        if (!in.empty()) readers[in].push_back(n);
      if (!g.nodes[n].outputs.empty()) position[g.nodes[n].outputs[0]] = n;
    }
  }
};

// The graph's nodes with those at the positions in `gone` left out and each of `fused` put at its position.
void rewrite(Graph& g, std::map<std::size_t, Node> fused, const std::set<std::size_t>& gone) {
  if (fused.empty()) return;
  std::vector<Node> kept;
  for (std::size_t n = 0; n < g.nodes.size(); ++n)
    if (const auto it = fused.find(n); it != fused.end())
      kept.push_back(std::move(it->second));
    else if (!gone.count(n))
      kept.push_back(std::move(g.nodes[n]));
  g.nodes = std::move(kept);
}

}  // namespace

void fuse_norms_and_gelus(Graph& g) {
  const Index index(g);
  const auto& position = index.position;
  const auto& readers = index.readers;
  const auto count = [&](const std::string& v) { return readers.count(v) ? readers.at(v).size() : 0; };
  const auto last_axis_mean = [](const Node& n) {
    return n.inputs.size() == 1 && n.integers("axes", {}) == std::vector<std::int64_t>{-1} && n.integer("keepdims", 1) == 1;
  };
  const auto other = [](const Node& n, const std::string& one) { return n.inputs.at(n.inputs.at(0) == one ? 1 : 0); };
  const auto vector_parameter = [&](const std::string& v) {
    return g.initializers.count(v) && !g.constants.at(v).integer && g.constants.at(v).dims.size() == 1;
  };
  std::set<std::size_t> gone;
  std::map<std::size_t, Node> fused;  // by the position of the pattern's last node
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& mean = g.nodes[n];
    if (mean.op != "ReduceMean" || !last_axis_mean(mean) || mean.outputs.size() != 1) continue;
    const std::string& x = mean.inputs[0];
    const Node* sub = only_reader(g, readers, mean.outputs[0], "Sub");
    if (!sub || sub->inputs != std::vector<std::string>{x, mean.outputs[0]}) continue;
    const std::string& centred = sub->outputs.at(0);
    if (count(centred) != 2 || centred == g.output) continue;
    const auto& both = readers.at(centred);
    const Node *pow = &g.nodes[both[0]], *div = &g.nodes[both[1]];
    if (pow->op == "Div") std::swap(pow, div);
    if (pow->op != "Pow" || div->op != "Div" || pow->inputs.size() != 2 || pow->inputs[0] != centred ||
        scalar(g, pow->inputs[1]) != 2.0f || div->inputs.size() != 2 || div->inputs[0] != centred)
      continue;
    const Node* variance = only_reader(g, readers, pow->outputs.at(0), "ReduceMean");
    if (!variance || !last_axis_mean(*variance)) continue;
    const Node* plus = only_reader(g, readers, variance->outputs.at(0), "Add");
    if (!plus || plus->inputs.size() != 2) continue;
    const auto epsilon = scalar(g, other(*plus, variance->outputs[0]));
    const Node* root = only_reader(g, readers, plus->outputs.at(0), "Sqrt");
    if (!epsilon || !root || div->inputs[1] != root->outputs.at(0) || count(root->outputs[0]) != 1) continue;
    const Node* scale = only_reader(g, readers, div->outputs.at(0), "Mul");
    if (!scale || scale->inputs.size() != 2 || !vector_parameter(other(*scale, div->outputs[0]))) continue;
    const Node* shift = only_reader(g, readers, scale->outputs.at(0), "Add");
    if (!shift || shift->inputs.size() != 2 || !vector_parameter(other(*shift, scale->outputs[0]))) continue;
    Node ln;
    ln.op = "LayerNormalization";
    ln.name = shift->name;
    ln.inputs = {x, other(*scale, div->outputs[0]), other(*shift, scale->outputs[0])};
    ln.outputs = {shift->outputs.at(0)};
    ln.attributes["axis"].i = -1;
    ln.attributes["epsilon"].kind = Attribute::Kind::real;
    ln.attributes["epsilon"].f = *epsilon;
    for (const Node* part : {&mean, sub, pow, div, variance, plus, root, scale, shift})
      gone.insert(position.at(part->outputs.at(0)));
    fused[position.at(shift->outputs[0])] = std::move(ln);
  }
  // GELU as nn.GELU exports it: x * (erf(x / sqrt(2)) + 1) * 0.5.
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& div = g.nodes[n];
    if (div.op != "Div" || div.inputs.size() != 2 || div.outputs.size() != 1 || gone.count(n)) continue;
    const auto root_two = scalar(g, div.inputs[1]);
    if (!root_two || std::abs(*root_two - std::sqrt(2.0f)) > 1e-6f) continue;
    const std::string& x = div.inputs[0];
    const Node* erf = only_reader(g, readers, div.outputs.at(0), "Erf");
    const Node* plus = erf ? only_reader(g, readers, erf->outputs.at(0), "Add") : nullptr;
    if (!plus || plus->inputs.size() != 2 || scalar(g, other(*plus, erf->outputs[0])) != 1.0f) continue;
    const Node* times = only_reader(g, readers, plus->outputs.at(0), "Mul");
    if (!times || times->inputs.size() != 2 || other(*times, plus->outputs[0]) != x) continue;
    const Node* half = only_reader(g, readers, times->outputs.at(0), "Mul");
    if (!half || half->inputs.size() != 2 || scalar(g, other(*half, times->outputs[0])) != 0.5f) continue;
    Node gelu;
    gelu.op = "Gelu";
    gelu.name = half->name;
    gelu.inputs = {x};
    gelu.outputs = {half->outputs.at(0)};
    for (const Node* part : {&div, erf, plus, times, half}) gone.insert(position.at(part->outputs.at(0)));
    fused[position.at(half->outputs[0])] = std::move(gelu);
  }
  rewrite(g, std::move(fused), gone);
}

void fuse_channel_shuffles(Graph& g) {
  const Index index(g);
  const auto shape = [&](const Node& reshape) -> const std::vector<std::int64_t>* {
    if (reshape.inputs.size() != 2 || reshape.integer("allowzero", 0) != 0) return nullptr;
    const auto it = g.constants.find(reshape.inputs[1]);
    return it != g.constants.end() && it->second.integer ? &it->second.ints : nullptr;
  };
  const auto is_batch = [](std::int64_t d) { return d == kBatch || d == 0; };
  std::set<std::size_t> gone;
  std::map<std::size_t, Node> fused;
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& split = g.nodes[n];  // [N, C, H, W] to [N, g, C / g, H, W]
    const auto* s = split.op == "Reshape" ? shape(split) : nullptr;
    if (!s || s->size() != 5 || !is_batch((*s)[0]) ||
        std::any_of(s->begin() + 1, s->end(), [](std::int64_t d) { return d < 1 || d > (1 << 24); }))
      continue;
    const Node* swap = only_reader(g, index.readers, split.outputs.at(0), "Transpose");
    if (!swap || swap->integers("perm", {}) != std::vector<std::int64_t>{0, 2, 1, 3, 4}) continue;
    const Node* merge = only_reader(g, index.readers, swap->outputs.at(0), "Reshape");
    const auto* m = merge ? shape(*merge) : nullptr;
    const std::int64_t channels = (*s)[1] * (*s)[2];
    if (!m || m->size() != 4 || !is_batch((*m)[0]) || ((*m)[1] != -1 && (*m)[1] != channels) ||
        (*m)[2] != (*s)[3] || (*m)[3] != (*s)[4])
      continue;
    Node shuffle;
    shuffle.op = "ChannelShuffle";
    shuffle.name = split.name;
    shuffle.inputs = {split.inputs[0]};
    shuffle.outputs = {merge->outputs.at(0)};
    shuffle.attributes["group"].i = (*s)[1];
    shuffle.attributes["image"].kind = Attribute::Kind::integers;
    shuffle.attributes["image"].ints = {channels, (*s)[3], (*s)[4]};
    gone.insert({n, index.position.at(swap->outputs[0])});
    fused[index.position.at(merge->outputs[0])] = std::move(shuffle);
  }
  rewrite(g, std::move(fused), gone);
}

void split_into_slices(Graph& g) {
  // A part that nothing reads gets no Slice: it would be a path from the split value that never joins.
  std::set<std::string> read = {g.output};
  for (const Node& n : g.nodes) read.insert(n.inputs.begin(), n.inputs.end());
  std::vector<Node> nodes;
  for (Node& n : g.nodes) {
    if (n.op != "Split") {
      nodes.push_back(std::move(n));
      continue;
    }
    const auto sizes = n.inputs.size() > 1 ? g.constants.find(n.inputs[1]) : g.constants.end();
    if (n.inputs.empty() || sizes == g.constants.end() || !sizes->second.integer ||
        sizes->second.ints.size() != n.outputs.size())
      throw InputError(one_line(g.source + ": " + n.describe() +
                                ": ddl takes a Split whose sizes are given, one for each output, as PyTorch exports them"));
    const auto scalar = [](std::int64_t v) { return Constant{{1}, true, {}, {v}}; };
    std::int64_t start = 0;
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      const std::int64_t size = sizes->second.ints[k];
      if (size < 0 || size > (1 << 24)) throw InputError(one_line(g.source + ": " + n.describe() + ": a size of " + std::to_string(size)));
      const std::string& out = n.outputs[k];
      if (read.count(out)) {
        Node slice;
        slice.op = "Slice";
        slice.name = n.name + "#" + std::to_string(k);
        slice.inputs = {n.inputs[0], out + "#starts", out + "#ends", out + "#axes"};
        slice.outputs = {out};
        g.constants[slice.inputs[1]] = scalar(start);
        g.constants[slice.inputs[2]] = scalar(start + size);
        g.constants[slice.inputs[3]] = scalar(n.integer("axis", 0));
        nodes.push_back(std::move(slice));
      }
      start += size;
    }
  }
  g.nodes = std::move(nodes);
}

}  // namespace ddl::onnx
