#include "models/onnx/graph_piece.hpp"

#include <algorithm>
#include <set>

#include "core/error.hpp"
#include "core/layers/subgraph.hpp"
#include "models/onnx/message_text.hpp"

namespace ddl::onnx {
namespace {

static_assert(kBatch == kBatchTimes, "folded shapes and the Subgraph name the batch alike");

using Kind = SubgraphOp::Kind;
using dim = dnnl::memory::dim;

const std::map<std::string, Kind>& kinds() {
  static const std::map<std::string, Kind> table = {
      {"Add", Kind::add},           {"Sub", Kind::sub},         {"Mul", Kind::mul},
      {"Div", Kind::div},           {"Pow", Kind::pow},         {"Sqrt", Kind::sqrt},
      {"Erf", Kind::erf},           {"Identity", Kind::identity}, {"Dropout", Kind::identity},
      {"Relu", Kind::relu},         {"Sigmoid", Kind::sigmoid}, {"Tanh", Kind::tanh},
      {"Cast", Kind::identity},     {"MatMul", Kind::matmul},   {"Gemm", Kind::matmul},
      {"Softmax", Kind::softmax},   {"ReduceMean", Kind::reduce_mean}, {"Transpose", Kind::transpose},
      {"Reshape", Kind::reshape},   {"Flatten", Kind::reshape}, {"Expand", Kind::expand},
      {"Concat", Kind::concat},     {"Slice", Kind::slice},     {"Gather", Kind::gather},
      {"LayerNormalization", Kind::layer_norm}, {"Gelu", Kind::gelu},
      {"Squeeze", Kind::squeeze},   {"Unsqueeze", Kind::unsqueeze}};
  return table;
}

// The nodes of a piece, in the graph's order, and the value it ends in.
struct Region {
  std::vector<std::size_t> nodes;
  std::string end;
};

class PieceBuilder {
 public:
  PieceBuilder(const Graph& g, const std::map<std::string, std::vector<std::size_t>>& readers,
               const std::set<std::string>& from_parameters)
      : g_(g), readers_(readers), from_parameters_(from_parameters) {
    for (std::size_t n = 0; n < g_.nodes.size(); ++n)
      for (const std::string& out : g_.nodes[n].outputs) producer_[out] = n;
  }

  std::optional<GraphPiece> build(const std::string& from) {
    const auto region = find_region(from);
    if (!region) return std::nullopt;
    // An operator neither the layers nor a piece have is named. One that only the layers have (a Conv) in
    // a piece that needs a piece's operators (a Transpose) is named with them; among the layers' operators
    // alone the layers' own refusal stands.
    static const std::set<std::string> layers = {"Conv",          "BatchNormalization", "MaxPool",
                                                 "AveragePool",   "GlobalAveragePool",  "GlobalMaxPool",
                                                 "LeakyRelu",     "Clip",               "HardSigmoid",
                                                 "HardSwish",     "Pad",                "ChannelShuffle"};
    static const std::set<std::string> layers_too = {"Identity", "Dropout", "Relu", "Sigmoid", "Tanh", "Gemm",
                                                     "ReduceMean", "Flatten", "Reshape", "Add", "Mul", "Concat"};
    const Node *layer_only = nullptr, *piece_only = nullptr;
    for (const std::size_t n : region->nodes) {
      const Node& node = g_.nodes[n];
      if (node.outputs.empty() || node.outputs[0].empty()) refuse(node, "it has no output");
      if (!kinds().count(node.op) && !layers.count(node.op))
        refuse(node, "ddl does not support this operator (docs/onnx.md lists those it does)");
      if (!layer_only && layers.count(node.op)) layer_only = &node;
      if (!piece_only && kinds().count(node.op) && !layers_too.count(node.op)) piece_only = &node;
    }
    if (layer_only && piece_only)
      refuse(*piece_only, "ddl runs this operator in a piece of N-d operations (docs/onnx.md, \"Pieces\"), and the "
                          "piece it would be in, from '" + from + "' to '" + region->end + "', also holds " +
                          layer_only->describe() + ", which a piece cannot");
    if (layer_only) return std::nullopt;
    value_[from] = 0;
    // Parameters first, then constants, then the operations' outputs: the Subgraph's numbering.
    for (const bool parameters : {true, false})
      for (const std::size_t n : region->nodes)
        for (const std::size_t i : data_inputs(g_.nodes[n])) {
          const std::string& in = g_.nodes[n].inputs[i];
          if (value_.count(in) || !g_.constants.count(in) || is_parameter(in) != parameters) continue;
          const Constant& c = g_.constants.at(in);
          if (c.integer) refuse(g_.nodes[n], "takes integers '" + in + "' where ddl expects real numbers");
          value_[in] = static_cast<int>(1 + params_.size() + constants_.size());
          if (parameters)
            params_.push_back(in);
          else
            constants_.push_back({dims_t(c.dims.begin(), c.dims.end()), c.floats});
        }
    // A LayerNormalization without a shift shifts by zeros.
    for (const std::size_t n : region->nodes)
      if (const Node& node = g_.nodes[n]; node.op == "LayerNormalization" && !given(node, 2)) {
        value_[node.outputs.at(0) + "#shift"] = static_cast<int>(1 + params_.size() + constants_.size());
        constants_.push_back({{}, std::vector<float>(constant(node, 1).size(), 0.0f)});
        constants_.back().dims = {static_cast<dim>(constants_.back().values.size())};
      }
    // nn.Linear at opset 13, x @ W^T + b: the weight's Transpose that only the MatMul reads is read in
    // place, and the bias that an Add alone gives the product is the product's own (oneDNN's matmul bias).
    std::set<std::size_t> taken_in;
    std::map<std::string, std::size_t> position;
    for (const std::size_t n : region->nodes) position[g_.nodes[n].outputs.at(0)] = n;
    for (const std::size_t n : region->nodes) {
      const Node& node = g_.nodes[n];
      if (node.op != "MatMul" || node.inputs.size() != 2 || !position.count(node.inputs[1])) continue;
      const Node& t = g_.nodes[position.at(node.inputs[1])];
      if (t.op != "Transpose" || t.integers("perm", {1, 0}) != std::vector<std::int64_t>{1, 0} ||
          !is_parameter(t.inputs.at(0)) || g_.constants.at(t.inputs[0]).dims.size() != 2 ||
          readers_of(node.inputs[1]) != 1)
        continue;
      read_transposed_[node.inputs[1]] = t.inputs[0];
      taken_in.insert(position.at(node.inputs[1]));
      const auto r = readers_.find(node.outputs.at(0));
      if (r == readers_.end() || r->second.size() != 1 || node.outputs[0] == g_.output) continue;
      const Node& plus = g_.nodes[r->second[0]];
      if (plus.op != "Add" || plus.inputs.size() != 2 || plus.outputs.empty()) continue;
      const std::string& bias = plus.inputs[plus.inputs[0] == node.outputs[0] ? 1 : 0];
      if (is_parameter(bias) && is_row(g_.constants.at(bias).dims, g_.constants.at(t.inputs[0]).dims[0]) &&
          position.count(plus.outputs[0])) {
        with_bias_[node.outputs[0]] = {bias, plus.outputs[0]};
        taken_in.insert(position.at(plus.outputs[0]));
      }
    }
    for (const std::size_t n : region->nodes)
      if (!taken_in.count(n)) translate(g_.nodes[n]);
    if (last_output_ != region->end) {
      const Node& last = g_.nodes[region->nodes.back()];
      add(op(Kind::identity, {use(region->end, last)}, last), region->end);
    }
    std::vector<ParamSpec> specs;
    for (std::size_t p = 0; p < params_.size(); ++p) {
      const Constant& c = g_.constants.at(params_[p]);
      specs.push_back({"param" + std::to_string(p), dims_t(c.dims.begin(), c.dims.end()),
                       c.dims.size() > 1 ? Init::normal_002 : Init::zeros});
    }
    GraphPiece piece;
    piece.layer = std::make_unique<Subgraph>(std::move(specs), std::move(constants_), std::move(ops_));
    piece.params = params_;
    piece.end = region->end;
    return piece;
  }

 private:
  bool is_constant(const std::string& v) const { return v.empty() || g_.constants.count(v); }
  bool is_parameter(const std::string& v) const {
    return g_.initializers.count(v) && g_.constants.count(v) && !g_.constants.at(v).integer;
  }
  // Dims of a bias added to every row of `cols` columns: [cols] or [1, cols].
  static bool is_row(const std::vector<std::int64_t>& dims, std::int64_t cols) {
    return dims == std::vector<std::int64_t>{cols} || dims == std::vector<std::int64_t>{1, cols};
  }
  std::size_t readers_of(const std::string& v) const {
    const auto it = readers_.find(v);
    return (it == readers_.end() ? 0 : it->second.size()) + (v == g_.output ? 1 : 0);
  }

  // From `from`, the nodes in order that read what is inside, until one value alone is left to be read
  // further on. A node that computes from parameters only (a weight's Transpose) comes in with its reader.
  std::optional<Region> find_region(const std::string& from) {
    std::map<std::string, std::size_t> unread = {{from, readers_of(from)}};
    std::set<std::size_t> taken;
    Region region;
    const auto first = readers_.find(from);
    if (first == readers_.end() || first->second.empty()) return std::nullopt;
    const std::size_t start = *std::min_element(first->second.begin(), first->second.end());
    for (std::size_t n = start; n < g_.nodes.size(); ++n) {
      const Node& node = g_.nodes[n];
      if (std::none_of(node.inputs.begin(), node.inputs.end(), [&](const std::string& in) { return unread.count(in); }))
        continue;
      for (const std::string& in : node.inputs)
        if (!is_constant(in) && !unread.count(in)) {
          if (!from_parameters_.count(in)) return std::nullopt;
          take_from_parameters(in, unread, taken);
        }
      take(n, unread, taken);
      std::vector<std::string> live;
      for (const auto& [value, count] : unread)
        if (count > 0) live.push_back(value);
      if (live.empty()) return std::nullopt;
      if (live.size() == 1) {
        if (live[0] == from) return std::nullopt;  // only a node whose output nothing reads was taken
        region.nodes.assign(taken.begin(), taken.end());
        region.end = live[0];
        return region;
      }
    }
    return std::nullopt;
  }
  void take(std::size_t n, std::map<std::string, std::size_t>& unread, std::set<std::size_t>& taken) {
    const Node& node = g_.nodes[n];
    for (const std::string& in : node.inputs)
      if (const auto it = unread.find(in); it != unread.end() && it->second > 0) --it->second;
    for (const std::string& out : node.outputs)
      if (!out.empty()) unread[out] = readers_of(out);
    taken.insert(n);
  }
  // Takes in the nodes that compute v from parameters.
  void take_from_parameters(const std::string& v, std::map<std::string, std::size_t>& unread, std::set<std::size_t>& taken) {
    const std::size_t n = producer_.at(v);
    if (taken.count(n)) return;
    for (const std::string& in : g_.nodes[n].inputs)
      if (!is_constant(in)) take_from_parameters(in, unread, taken);
    take(n, unread, taken);
  }

  [[noreturn]] void refuse(const Node& n, const std::string& why) const {
    throw InputError(one_line(g_.source + ": " + n.describe() + ": " + why));
  }
  SubgraphOp op(Kind kind, std::vector<int> inputs, const Node& n) const {
    SubgraphOp o;
    o.kind = kind;
    o.inputs = std::move(inputs);
    o.name = one_line(g_.source + ": " + n.describe());
    return o;
  }
  const Constant& constant(const Node& n, std::size_t input) const {
    if (input >= n.inputs.size() || !g_.constants.count(n.inputs[input]))
      refuse(n, "its input " + std::to_string(input + 1) + " is not a constant");
    return g_.constants.at(n.inputs[input]);
  }
  const std::vector<std::int64_t>& ints(const Node& n, std::size_t input) const {
    const Constant& c = constant(n, input);
    if (!c.integer) refuse(n, "its input " + std::to_string(input + 1) + " is not of integers");
    return c.ints;
  }
  bool given(const Node& n, std::size_t input) const { return input < n.inputs.size() && !n.inputs[input].empty(); }
  const std::string& input(const Node& n, std::size_t i) const {
    if (!given(n, i)) refuse(n, "input " + std::to_string(i + 1) + " is missing");
    return n.inputs[i];
  }
  // Integers that must be the file's own, not folded from the batch (kBatch * k): axes, indices, bounds.
  const std::vector<std::int64_t>& fixed(const Node& n, const std::vector<std::int64_t>& values) const {
    for (const std::int64_t v : values)
      if (v <= kBatch) refuse(n, "ddl takes its axes, indices and bounds as numbers that do not follow the batch");
    return values;
  }

  // The inputs that are tensors the operation computes on, not shapes, axes or indices.
  static std::vector<std::size_t> data_inputs(const Node& n) {
    const std::string& op = n.op;
    std::size_t count = 1;
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "MatMul") count = 2;
    if (op == "Gemm" || op == "LayerNormalization") count = 3;
    if (op == "Concat") count = n.inputs.size();
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < std::min(count, n.inputs.size()); ++i)
      if (!n.inputs[i].empty()) out.push_back(i);
    return out;
  }
  int use(const std::string& v, const Node& n) const {
    const auto it = value_.find(v);
    if (it == value_.end()) refuse(n, "reads '" + v + "', which is computed outside this piece");
    return it->second;
  }
  void add(SubgraphOp o, const std::string& output) {
    ops_.push_back(std::move(o));
    value_[output] = static_cast<int>(1 + params_.size() + constants_.size() + ops_.size() - 1);
    last_output_ = output;
  }

  void translate(const Node& n) {
    const Kind kind = kinds().at(n.op);
    const std::string& out = n.outputs.at(0);
    SubgraphOp o = op(kind, {use(input(n, 0), n)}, n);
    if (n.op == "MatMul" && read_transposed_.count(input(n, 1))) {
      o.inputs.push_back(use(read_transposed_.at(n.inputs[1]), n));
      o.transpose_b = true;
      if (const auto b = with_bias_.find(out); b != with_bias_.end()) {
        o.inputs.push_back(use(b->second.first, n));
        return add(std::move(o), b->second.second);
      }
    } else if (kind == Kind::add || kind == Kind::sub || kind == Kind::mul || kind == Kind::div || n.op == "MatMul") {
      o.inputs.push_back(use(input(n, 1), n));
    } else if (kind == Kind::matmul) {  // Gemm: a times b (read transposed where transB), plus c
      if (n.integer("transA", 0) != 0 || n.real("alpha", 1) != 1 || n.real("beta", 1) != 1)
        refuse(n, "ddl takes a Gemm with transA = 0 and alpha = beta = 1");
      o.inputs.push_back(use(input(n, 1), n));
      o.transpose_b = n.integer("transB", 0) != 0;
      const auto& w = g_.constants.find(n.inputs[1]);
      const bool bias_of_rows = given(n, 2) && w != g_.constants.end() && w->second.dims.size() == 2 &&
                                is_parameter(n.inputs[2]) &&
                                is_row(g_.constants.at(n.inputs[2]).dims, w->second.dims[o.transpose_b ? 0 : 1]);
      if (bias_of_rows) {  // nn.Linear's: the product's own bias
        o.inputs.push_back(use(n.inputs[2], n));
      } else if (given(n, 2)) {
        add(std::move(o), out + "#ab");
        o = op(Kind::add, {value_.at(out + "#ab"), use(n.inputs[2], n)}, n);
      }
    } else if (kind == Kind::pow) {
      const Constant& e = constant(n, 1);
      if (e.size() != 1) refuse(n, "ddl raises to one constant power");
      o.exponent = e.integer ? static_cast<float>(e.ints[0]) : e.floats[0];
    } else if (n.op == "Dropout") {
      if (given(n, 1) && (constant(n, 1).integer || constant(n, 1).size() != 1)) refuse(n, "its ratio is not one number");
      const float ratio = given(n, 1) ? constant(n, 1).floats[0] : n.real("ratio", 0.5f);
      if (ratio != 0.0f) refuse(n, "ddl takes a Dropout among these operators at ratio 0 only");
    } else if (n.op == "Cast") {
      if (n.integer("to", 1) != 1) refuse(n, "ddl casts to float only here");
    } else if (kind == Kind::softmax) {
      o.axis = n.integer("axis", -1);
    } else if (kind == Kind::layer_norm) {
      if (n.integer("axis", -1) != -1) refuse(n, "ddl normalizes over the last axis only (axis -1)");
      o.epsilon = n.real("epsilon", 1e-5f);
      o.inputs.push_back(use(input(n, 1), n));
      o.inputs.push_back(use(given(n, 2) ? n.inputs[2] : out + "#shift", n));
    } else if (kind == Kind::reduce_mean) {
      o.ints = fixed(n, given(n, 1) ? ints(n, 1) : n.integers("axes", {}));
      if (o.ints.empty()) refuse(n, "ddl takes a ReduceMean over given axes");
      o.keep_dims = n.integer("keepdims", 1) != 0;
    } else if (kind == Kind::transpose) {
      o.ints = fixed(n, n.integers("perm", {}));
    } else if (n.op == "Reshape") {
      o.ints = ints(n, 1);
      if (n.integer("allowzero", 0) != 0) refuse(n, "ddl takes a Reshape without allowzero");
    } else if (n.op == "Flatten") {
      if (n.integer("axis", 1) != 1) refuse(n, "ddl flattens from axis 1 only");
      o.ints = {0, -1};
    } else if (kind == Kind::squeeze || kind == Kind::unsqueeze) {  // since opset 13 the axes are an input
      if (given(n, 1)) o.ints = fixed(n, ints(n, 1));
      if (kind == Kind::unsqueeze && o.ints.empty()) refuse(n, "it names no axes");
    } else if (kind == Kind::expand) {
      o.ints = ints(n, 1);
    } else if (kind == Kind::concat) {
      o.axis = n.integer("axis", 0);
      for (std::size_t i = 1; i < n.inputs.size(); ++i) o.inputs.push_back(use(n.inputs[i], n));
    } else if (kind == Kind::slice) {
      o.starts = fixed(n, ints(n, 1));
      o.ends = fixed(n, ints(n, 2));
      if (given(n, 3)) {
        o.ints = fixed(n, ints(n, 3));
      } else {
        for (std::size_t i = 0; i < o.starts.size(); ++i) o.ints.push_back(static_cast<std::int64_t>(i));
      }
      if (given(n, 4)) o.steps = fixed(n, ints(n, 4));
      if (o.ends.size() != o.starts.size() || o.ints.size() != o.starts.size() ||
          (!o.steps.empty() && o.steps.size() != o.starts.size()))
        refuse(n, "its starts, ends, axes and steps differ in length");
    } else if (kind == Kind::gather) {
      const Constant& indices = constant(n, 1);
      if (!indices.integer || indices.dims.size() > 1) refuse(n, "ddl gathers at one index or a list of them");
      o.axis = n.integer("axis", 0);
      o.indices = fixed(n, indices.ints);
      o.scalar_index = indices.dims.empty();
    }
    add(std::move(o), out);
  }

  const Graph& g_;
  const std::map<std::string, std::vector<std::size_t>>& readers_;
  std::map<std::string, std::size_t> producer_;
  const std::set<std::string>& from_parameters_;
  std::map<std::string, std::string> read_transposed_;  // a weight's transpose: the weight, read in place
  std::map<std::string, std::pair<std::string, std::string>> with_bias_;  // a product: its bias, the sum's value
  std::map<std::string, int> value_;
  std::vector<std::string> params_;
  std::vector<SubgraphConstant> constants_;
  std::vector<SubgraphOp> ops_;
  std::string last_output_;
};

}  // namespace

std::optional<GraphPiece> graph_piece(const Graph& graph, const std::string& from,
                                      const std::map<std::string, std::vector<std::size_t>>& readers,
                                      const std::set<std::string>& from_parameters) {
  return PieceBuilder(graph, readers, from_parameters).build(from);
}

}  // namespace ddl::onnx
