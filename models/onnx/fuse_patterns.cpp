#include "models/onnx/fuse_patterns.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "models/onnx/message_text.hpp"
#include "models/onnx/value_shapes.hpp"

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

namespace {

// What the patterns below share: the graph, who reads what, and the rewrite they build up.
struct Fusion {
  const Graph& g;
  Index index;
  std::set<std::size_t> gone;
  std::map<std::size_t, Node> fused;  // by the position of the pattern's last node

  explicit Fusion(const Graph& graph) : g(graph), index(graph) {}
  std::size_t count(const std::string& v) const { return index.readers.count(v) ? index.readers.at(v).size() : 0; }
  const Node* reader(const std::string& v, const std::string& op) const { return only_reader(g, index.readers, v, op); }
  static const std::string& other(const Node& n, const std::string& one) {
    return n.inputs.at(n.inputs.at(0) == one ? 1 : 0);
  }
  bool vector_parameter(const std::string& v) const {
    return g.initializers.count(v) && !g.constants.at(v).integer && g.constants.at(v).dims.size() == 1;
  }
  // `last` takes the place of the pattern's nodes.
  void replace(std::initializer_list<const Node*> parts, const Node& last, Node node) {
    for (const Node* part : parts) gone.insert(index.position.at(part->outputs.at(0)));
    fused[index.position.at(last.outputs.at(0))] = std::move(node);
  }
};

Node fused_node(const std::string& op, const Node& last, std::vector<std::string> inputs) {
  Node n;
  n.op = op;
  n.name = last.name;
  n.inputs = std::move(inputs);
  n.outputs = {last.outputs.at(0)};
  return n;
}

void set_real(Node& n, const std::string& name, float value) {
  n.attributes[name].kind = Attribute::Kind::real;
  n.attributes[name].f = value;
}

// The layer norm PyTorch writes out before opset 17, over the last axis.
void layer_norms(Fusion& f) {
  const auto last_axis_mean = [](const Node& n) {
    return n.inputs.size() == 1 && n.integers("axes", {}) == std::vector<std::int64_t>{-1} && n.integer("keepdims", 1) == 1;
  };
  for (const Node& mean : f.g.nodes) {
    if (mean.op != "ReduceMean" || !last_axis_mean(mean) || mean.outputs.size() != 1) continue;
    const std::string& x = mean.inputs[0];
    const Node* sub = f.reader(mean.outputs[0], "Sub");
    if (!sub || sub->inputs != std::vector<std::string>{x, mean.outputs[0]}) continue;
    const std::string& centred = sub->outputs.at(0);
    if (f.count(centred) != 2 || centred == f.g.output) continue;
    const auto& both = f.index.readers.at(centred);
    const Node *pow = &f.g.nodes[both[0]], *div = &f.g.nodes[both[1]];
    if (pow->op == "Div") std::swap(pow, div);
    if (pow->op != "Pow" || div->op != "Div" || pow->inputs.size() != 2 || pow->inputs[0] != centred ||
        scalar(f.g, pow->inputs[1]) != 2.0f || div->inputs.size() != 2 || div->inputs[0] != centred)
      continue;
    const Node* variance = f.reader(pow->outputs.at(0), "ReduceMean");
    if (!variance || !last_axis_mean(*variance)) continue;
    const Node* plus = f.reader(variance->outputs.at(0), "Add");
    if (!plus || plus->inputs.size() != 2) continue;
    const auto epsilon = scalar(f.g, Fusion::other(*plus, variance->outputs[0]));
    const Node* root = f.reader(plus->outputs.at(0), "Sqrt");
    if (!epsilon || !root || div->inputs[1] != root->outputs.at(0) || f.count(root->outputs[0]) != 1) continue;
    const Node* scale = f.reader(div->outputs.at(0), "Mul");
    if (!scale || scale->inputs.size() != 2 || !f.vector_parameter(Fusion::other(*scale, div->outputs[0]))) continue;
    const Node* shift = f.reader(scale->outputs.at(0), "Add");
    if (!shift || shift->inputs.size() != 2 || !f.vector_parameter(Fusion::other(*shift, scale->outputs[0]))) continue;
    Node ln = fused_node("LayerNormalization", *shift,
                         {x, Fusion::other(*scale, div->outputs[0]), Fusion::other(*shift, scale->outputs[0])});
    ln.attributes["axis"].i = -1;
    set_real(ln, "epsilon", *epsilon);
    f.replace({&mean, sub, pow, div, variance, plus, root, scale, shift}, *shift, std::move(ln));
  }
}

// GELU as nn.GELU exports it: x * (erf(x / sqrt(2)) + 1) * 0.5.
void gelus(Fusion& f) {
  for (std::size_t n = 0; n < f.g.nodes.size(); ++n) {
    const Node& div = f.g.nodes[n];
    if (div.op != "Div" || div.inputs.size() != 2 || div.outputs.size() != 1 || f.gone.count(n)) continue;
    const auto root_two = scalar(f.g, div.inputs[1]);
    if (!root_two || std::abs(*root_two - std::sqrt(2.0f)) > 1e-6f) continue;
    const std::string& x = div.inputs[0];
    const Node* erf = f.reader(div.outputs.at(0), "Erf");
    const Node* plus = erf ? f.reader(erf->outputs.at(0), "Add") : nullptr;
    if (!plus || plus->inputs.size() != 2 || scalar(f.g, Fusion::other(*plus, erf->outputs[0])) != 1.0f) continue;
    const Node* times = f.reader(plus->outputs.at(0), "Mul");
    if (!times || times->inputs.size() != 2 || Fusion::other(*times, plus->outputs[0]) != x) continue;
    const Node* half = f.reader(times->outputs.at(0), "Mul");
    if (!half || half->inputs.size() != 2 || scalar(f.g, Fusion::other(*half, times->outputs[0])) != 0.5f) continue;
    f.replace({&div, erf, plus, times, half}, *half, fused_node("Gelu", *half, {x}));
  }
}

// Mish as F.mish exports it: x * tanh(softplus(x)).
void mishes(Fusion& f) {
  for (const Node& softplus : f.g.nodes) {
    if (softplus.op != "Softplus" || softplus.inputs.size() != 1 || softplus.outputs.size() != 1) continue;
    const Node* tanh = f.reader(softplus.outputs[0], "Tanh");
    const Node* times = tanh ? f.reader(tanh->outputs.at(0), "Mul") : nullptr;
    if (!times || times->inputs.size() != 2 || Fusion::other(*times, tanh->outputs[0]) != softplus.inputs[0]) continue;
    f.replace({&softplus, tanh, times}, *times, fused_node("Mish", *times, {softplus.inputs[0]}));
  }
}

// nn.GroupNorm as PyTorch exports it: a Reshape of [N, C, ...] to [N, groups, -1], InstanceNormalization
// with a scale of ones and a shift of zeros, a Reshape back to the input's shape, a Mul by the weight and an
// Add of the bias, each unsqueezed to [C, 1, ...].
void group_norms(Fusion& f) {
  const auto ints = [&](const std::string& v) -> const std::vector<std::int64_t>* {
    const auto it = f.g.constants.find(v);
    return it != f.g.constants.end() && it->second.integer ? &it->second.ints : nullptr;
  };
  const auto filled = [&](const std::string& v, float value) {
    const auto it = f.g.constants.find(v);
    return it != f.g.constants.end() && !it->second.integer &&
           std::all_of(it->second.floats.begin(), it->second.floats.end(), [&](float x) { return x == value; });
  };
  // The per-channel parameter [C] that `v` unsqueezes to [C, 1, ...] for an input of `rank` (else "").
  const auto per_channel = [&](const std::string& v, std::size_t rank) -> std::string {
    const auto at = f.index.position.find(v);
    if (at == f.index.position.end()) return "";
    const Node& unsqueeze = f.g.nodes[at->second];
    std::vector<std::int64_t> axes(rank - 2);
    std::iota(axes.begin(), axes.end(), 1);
    const auto* given = unsqueeze.inputs.size() == 2 ? ints(unsqueeze.inputs[1]) : nullptr;
    if (unsqueeze.op != "Unsqueeze" || !given || *given != axes || !f.vector_parameter(unsqueeze.inputs[0])) return "";
    return unsqueeze.inputs[0];
  };
  for (const Node& to_groups : f.g.nodes) {
    const auto* grouped = to_groups.op == "Reshape" && to_groups.inputs.size() == 2 ? ints(to_groups.inputs[1]) : nullptr;
    if (!grouped || grouped->size() != 3 || ((*grouped)[0] != kBatch && (*grouped)[0] != 0) || (*grouped)[1] < 1 ||
        (*grouped)[2] != -1)
      continue;
    const Node* norm = f.reader(to_groups.outputs.at(0), "InstanceNormalization");
    if (!norm || norm->inputs.size() != 3 || !filled(norm->inputs[1], 1.0f) || !filled(norm->inputs[2], 0.0f)) continue;
    const Node* back = f.reader(norm->outputs.at(0), "Reshape");
    const auto* shape = back && back->inputs.size() == 2 ? ints(back->inputs[1]) : nullptr;
    // Back to the input's own dims, of whole groups.
    const auto x = f.g.dims.find(to_groups.inputs[0]);
    if (!shape || x == f.g.dims.end() || shape->size() != x->second.size() || shape->size() < 3 ||
        (*shape)[0] != kBatch || !std::equal(shape->begin() + 1, shape->end(), x->second.begin() + 1) ||
        (*shape)[1] % (*grouped)[1] != 0)
      continue;
    const Node* scale = f.reader(back->outputs.at(0), "Mul");
    const Node* shift = scale ? f.reader(scale->outputs.at(0), "Add") : nullptr;
    if (!shift || scale->inputs.size() != 2 || shift->inputs.size() != 2) continue;
    const std::string weight = per_channel(Fusion::other(*scale, back->outputs[0]), shape->size());
    const std::string bias = per_channel(Fusion::other(*shift, scale->outputs[0]), shape->size());
    if (weight.empty() || bias.empty() || f.g.constants.at(weight).size() != static_cast<std::size_t>((*shape)[1]) ||
        f.g.constants.at(bias).size() != static_cast<std::size_t>((*shape)[1]))
      continue;
    Node gn = fused_node("GroupNormalization", *shift, {to_groups.inputs[0], weight, bias});
    gn.attributes["num_groups"].i = (*grouped)[1];
    set_real(gn, "epsilon", norm->real("epsilon", 1e-5f));
    f.replace({&to_groups, norm, back, scale}, *shift, std::move(gn));
  }
}

}  // namespace

void fuse_norms_and_activations(Graph& g) {
  Fusion f(g);
  layer_norms(f);
  gelus(f);
  mishes(f);
  group_norms(f);
  rewrite(g, std::move(f.fused), f.gone);
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
    const auto dims = n.inputs.empty() ? g.dims.end() : g.dims.find(n.inputs[0]);
    const Dims* input = dims == g.dims.end() ? nullptr : &dims->second;
    const auto given = n.inputs.size() > 1 ? g.constants.find(n.inputs[1]) : g.constants.end();
    const std::optional<Dims> sizes = split_sizes(n, input, given == g.constants.end() ? nullptr : &given->second);
    const auto batch = n.inputs.empty() ? g.batch_axes.end() : g.batch_axes.find(n.inputs[0]);
    if (input && batch != g.batch_axes.end() && axis_of(n, *input) == static_cast<std::size_t>(batch->second.axis))
      throw InputError(one_line(g.source + ": " + n.describe() + ": ddl does not split the batch axis"));
    if (!sizes)
      throw InputError(one_line(g.source + ": " + n.describe() +
                                ": ddl takes a Split into sizes given, one for each output, or into equal parts that "
                                "divide an axis of known length"));
    const auto scalar = [](std::int64_t v) { return Constant{{1}, true, {}, {v}}; };
    std::int64_t start = 0;
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      const std::int64_t size = (*sizes)[k];
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
