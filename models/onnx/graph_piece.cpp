#include "models/onnx/graph_piece.hpp"

#include <algorithm>
#include <functional>
#include <set>

#include "core/error.hpp"
#include "core/graph/graph_layer.hpp"
#include "core/graph/operator_registry.hpp"
#include "models/onnx/message_text.hpp"
#include "models/onnx/op_spec.hpp"

namespace ddl::onnx {
namespace {

static_assert(kBatch == kBatchTimes, "folded shapes and the graph layer name the batch alike");

using dim = dnnl::memory::dim;

// The operators that ddl's own layers take and a piece does not (a ChannelShuffle, fuse_patterns.hpp): a piece
// that holds one is left to the layers.
bool layer_only(const std::string& op) { return op == "ChannelShuffle"; }

// The operators ddl's own layers take too: among them alone the layers' refusal stands.
bool layers_take(const std::string& op) {
  static const std::set<std::string> taken = {
      "Conv",    "BatchNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LeakyRelu",
      "Clip",    "HardSigmoid",        "HardSwish", "Pad",       "ChannelShuffle",    "Identity",      "Dropout",
      "Relu",    "Sigmoid",            "Tanh",    "Gemm",        "ReduceMean",        "Flatten",       "Reshape", "Mish",
      "Add",     "Mul",                "Concat",  "Slice"};
  return taken.count(op) > 0;
}

// The nodes of a piece, in the graph's order, and the value it ends in.
struct Region {
  std::vector<std::size_t> nodes;
  std::string end;
};

// The values that cross each place a piece may be cut: before on_images[i], i >= 1 (the nodes computing on
// images, in order). A value crosses where it is computed before and read after (the piece's end is read
// after every place); a parameter, or a value computed from parameters alone, is read on one side only.
class Crossings {
 public:
  Crossings(const Graph& g, const std::vector<std::size_t>& on_images, const std::string& from, const std::string& end,
            const std::map<std::string, std::size_t>& producer, const std::set<std::string>& from_parameters,
            const std::function<bool(const std::string&)>& is_parameter)
      : g_(g), producer_(producer), from_parameters_(from_parameters), is_parameter_(is_parameter) {
    made_[from] = 0;
    order_.push_back(from);
    for (std::size_t p = 0; p < on_images.size(); ++p) {
      const Node& node = g_.nodes[on_images[p]];
      position_[on_images[p]] = p;
      for (const std::string& in : node.inputs) {
        if (made_.count(in)) last_read_[in] = p;
        read_from_parameters(in, p);
      }
      for (const std::string& out : node.outputs)
        if (!out.empty()) {
          made_[out] = p;
          order_.push_back(out);
        }
    }
    last_read_[end] = on_images.size();
    for (const auto& [v, span] : parameter_readers_)
      if (from_parameters_.count(v)) position_[producer_.at(v)] = span.first;
  }

  std::vector<std::string> at(std::size_t i) const {
    std::vector<std::string> crossing;
    for (const std::string& v : order_)
      if (const auto last = last_read_.find(v); made_.at(v) < i && last != last_read_.end() && last->second >= i)
        crossing.push_back(v);
    return crossing;
  }
  // Whether a cut may fall before on_images[i]: at most kMostCrossing values cross, each `known`, and
  // no parameter is read on both sides.
  bool may_cut(std::size_t i, const std::function<bool(const std::string&)>& known) const {
    const auto crossing = at(i);
    if (crossing.empty() || crossing.size() > kMostCrossing || !std::all_of(crossing.begin(), crossing.end(), known))
      return false;
    return std::none_of(parameter_readers_.begin(), parameter_readers_.end(),
                        [&](const auto& reader) { return reader.second.first < i && i <= reader.second.second; });
  }
  // A node's place among on_images; a node computing from parameters alone: its readers'.
  std::size_t position(std::size_t node) const { return position_.at(node); }

 private:
  // Notes that position p reads v, and so the parameters v is computed from.
  void read_from_parameters(const std::string& v, std::size_t p) {
    if (v.empty() || !(is_parameter_(v) || from_parameters_.count(v))) return;
    auto [it, fresh] = parameter_readers_.try_emplace(v, p, p);
    it->second = {std::min(it->second.first, p), std::max(it->second.second, p)};
    if (from_parameters_.count(v))
      for (const std::string& in : g_.nodes[producer_.at(v)].inputs) read_from_parameters(in, p);
  }

  const Graph& g_;
  const std::map<std::string, std::size_t>& producer_;
  const std::set<std::string>& from_parameters_;
  std::function<bool(const std::string&)> is_parameter_;
  std::vector<std::string> order_;  // the values computed on images, the piece's input first
  std::map<std::string, std::size_t> made_, last_read_;
  std::map<std::string, std::pair<std::size_t, std::size_t>> parameter_readers_;  // the first and last to read each
  std::map<std::size_t, std::size_t> position_;
};

class PieceBuilder {
 public:
  PieceBuilder(const Graph& g, const std::map<std::string, std::vector<std::size_t>>& readers,
               const std::set<std::string>& from_parameters)
      : g_(g), readers_(readers), from_parameters_(from_parameters) {
    for (std::size_t n = 0; n < g_.nodes.size(); ++n)
      for (const std::string& out : g_.nodes[n].outputs) producer_[out] = n;
  }

  std::optional<GraphPiece> build(const std::string& from, const std::function<std::uint64_t()>& next_seed, bool cut) {
    const auto region = find_region(from);
    if (!region || !all_operators_known(*region, from)) return std::nullopt;
    for (const std::size_t n : region->nodes)
      if (const Node& node = g_.nodes[n]; node.op == "BatchNormalization")
        for (std::size_t i = 3; i < std::min<std::size_t>(node.inputs.size(), 5); ++i) running_.insert(node.inputs[i]);
    const std::set<std::size_t> taken_in = linear_layers(*region);
    GraphPiece piece;
    piece.end = region->end;
    const auto spans = cut ? cut_region(*region, from) : std::vector<Span>{{region->nodes, {from}, {}}};
    for (std::size_t s = 0; s < spans.size(); ++s)
      piece.parts.push_back(build_part(spans[s], taken_in, s == 0, region->end, next_seed));
    return piece;
  }

 private:
  // The nodes of one layer of a piece, in the graph's order, the values crossing into it (the first: the
  // piece's input alone) and those crossing out of it (none for the last: it ends in the piece's end).
  struct Span {
    std::vector<std::size_t> nodes;
    std::vector<std::string> takes, hands_on;
  };

  GraphPiece::Part build_part(const Span& span, const std::set<std::size_t>& taken_in, bool first,
                              const std::string& end, const std::function<std::uint64_t()>& next_seed) {
    value_.clear();
    params_.clear();
    constants_.clear();
    ops_.clear();
    state_.clear();
    last_output_.clear();
    inputs_ = span.takes.size();
    for (std::size_t i = 0; i < span.takes.size(); ++i) value_[span.takes[i]] = static_cast<int>(i);
    number_parameters_and_constants(span.nodes);
    for (const std::size_t n : span.nodes)
      if (!taken_in.count(n)) translate(g_.nodes[n]);
    if (span.hands_on.empty() && last_output_ != end) {
      const Node& last = g_.nodes[span.nodes.back()];
      OpSpec identity;
      identity.type = "Identity";
      identity.name = one_line(g_.source + ": " + last.describe());
      identity.inputs = {use(end, last)};
      add(std::move(identity), end);
    }
    std::vector<ParamSpec> specs;
    for (std::size_t p = 0; p < params_.size(); ++p) {
      const Constant& c = g_.constants.at(params_[p]);
      specs.push_back({"param" + std::to_string(p), dims_t(c.dims.begin(), c.dims.end()),
                       c.dims.size() > 1 ? Init::normal_002 : Init::zeros});
    }
    BatchAxis batch;
    GraphEnds ends;
    if (first) {
      if (const auto it = g_.batch_axes.find(span.takes[0]); it != g_.batch_axes.end())
        batch = {it->second.axis, it->second.per_batch};
    } else {
      for (const std::string& v : span.takes) {
        const auto& dims = g_.dims.at(v);
        ends.takes.push_back({dims_t(dims.begin(), dims.end()), g_.batch_axes.at(v).axis});
      }
    }
    for (const std::string& v : span.hands_on) ends.hands_on.push_back(use(v, g_.nodes[span.nodes.back()]));
    const bool random = std::any_of(ops_.begin(), ops_.end(), [](const OpSpec& o) { return o.type == "Dropout"; });
    GraphPiece::Part part;
    auto layer = std::make_unique<GraphLayer>(std::move(specs), std::move(constants_), std::move(ops_), batch,
                                              random ? next_seed() : 0, ends);
    // Its operators' shapes checked now, for one image, so that what they cannot take is refused before any step:
    // the piece's input, or the one [1, K] tensor of the values crossing in.
    std::int64_t per_image = 0;
    for (const CrossingValue& v : ends.takes) per_image += static_cast<std::int64_t>(product(v.dims));
    if (const auto in = g_.dims.find(span.takes[0]); !first || in != g_.dims.end())
      layer->check_shapes(first ? dims_t(in->second.begin(), in->second.end()) : dims_t{1, per_image});
    part.layer = std::move(layer);
    part.params = params_;
    part.state = state_;
    part.state.resize(part.layer->state().size());  // its generators (a Dropout's) start from no initializer
    return part;
  }

  // graph_piece's cut: where the piece holds more than its share of the graph's products (1/16: no part
  // larger than a stage of 16 needs), it is cut after each share, at the first place where it may be.
  std::vector<Span> cut_region(const Region& region, const std::string& from) {
    std::vector<std::size_t> on_images;  // those computing from parameters alone go with their readers
    for (const std::size_t n : region.nodes)
      if (!from_parameters_.count(g_.nodes[n].outputs.at(0))) on_images.push_back(n);
    const std::size_t share = std::max<std::size_t>(1, (products_in_graph() + 15) / 16);
    const auto products = [&](std::size_t begin, std::size_t end) {
      return static_cast<std::size_t>(std::count_if(on_images.begin() + begin, on_images.begin() + end,
                                                    [&](std::size_t n) { return is_product(g_.nodes[n].op); }));
    };
    const Crossings crossings(g_, on_images, from, region.end, producer_, from_parameters_,
                              [&](const std::string& v) { return is_parameter(v); });
    // A product and the bias it takes in are one operator: no cut between them, next to each other or not.
    const auto parts_a_product = [&](std::size_t i) {
      return std::any_of(biased_products_.begin(), biased_products_.end(), [&](const auto& pair) {
        return crossings.position(pair.first) < i && i <= crossings.position(pair.second);
      });
    };
    std::vector<std::size_t> cuts = {0};
    for (std::size_t i = 1; i < on_images.size(); ++i)
      if (products(cuts.back(), i) >= share && products(i, on_images.size()) > 0 && !parts_a_product(i) &&
          crossings.may_cut(i, [&](const std::string& v) { return crossing_known(v); }))
        cuts.push_back(i);
    if (cuts.size() == 1) return {{region.nodes, {from}, {}}};
    cuts.push_back(on_images.size());
    std::vector<Span> spans;
    for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
      Span span;
      span.takes = c == 0 ? std::vector<std::string>{from} : crossings.at(cuts[c]);
      if (cuts[c + 1] < on_images.size()) span.hands_on = crossings.at(cuts[c + 1]);
      for (const std::size_t n : region.nodes) {
        const std::size_t at = crossings.position(n);
        if (at >= cuts[c] && at < cuts[c + 1]) span.nodes.push_back(n);
      }
      spans.push_back(std::move(span));
    }
    return spans;
  }
  bool crossing_known(const std::string& v) const {
    const auto dims = g_.dims.find(v);
    const auto batch = g_.batch_axes.find(v);
    return dims != g_.dims.end() && batch != g_.batch_axes.end() && batch->second.axis >= 0 &&
           static_cast<std::size_t>(batch->second.axis) < dims->second.size() &&
           dims->second[batch->second.axis] == batch->second.per_batch;
  }
  std::size_t products_in_graph() const {
    return std::count_if(g_.nodes.begin(), g_.nodes.end(), [](const Node& n) { return is_product(n.op); });
  }
  static bool is_product(const std::string& op) {
    return op == "Conv" || op == "ConvTranspose" || op == "MatMul" || op == "Gemm" || op == "Einsum";
  }

  // An operator neither the layers nor a piece have is named. One that only the layers have (a
  // ChannelShuffle) in a piece that needs a piece's operators (a Transpose) is named with them; among the
  // layers' operators alone the layers' own refusal stands (false).
  bool all_operators_known(const Region& region, const std::string& from) const {
    const Node* held = nullptr;  // a node only the layers take
    for (const std::size_t n : region.nodes) {
      const Node& node = g_.nodes[n];
      if (node.outputs.empty() || node.outputs[0].empty()) refuse(node, "it has no output");
      if (!find_operator(node.op) && !layer_only(node.op))
        refuse(node, "ddl does not support this operator (docs/onnx.md lists those it does)");
      if (!held && layer_only(node.op)) held = &node;
    }
    if (!held) return true;
    for (const std::size_t n : region.nodes)
      if (const Node& node = g_.nodes[n]; !layers_take(node.op))
        refuse(node, "ddl runs this operator in a piece of N-d operations (docs/onnx.md, \"Pieces\"), and the "
                     "piece it would be in, from '" + from + "' to '" + region.end + "', also holds " +
                     held->describe() + ", which a piece cannot");
    return false;
  }

  // After the inputs, parameters first, then constants, then the operations' outputs: the GraphLayer's
  // numbering. A BatchNormalization's running statistics are constants the piece moves (its state), not
  // parameters.
  void number_parameters_and_constants(const std::vector<std::size_t>& nodes) {
    for (const bool parameters : {true, false})
      for (const std::size_t n : nodes)
        for (const std::size_t i : data_inputs(g_.nodes[n])) {
          const std::string& in = g_.nodes[n].inputs[i];
          if (value_.count(in) || !g_.constants.count(in) || is_parameter(in) != parameters) continue;
          const Constant& c = g_.constants.at(in);
          if (c.integer) continue;  // given to the operator as numbers
          value_[in] = static_cast<int>(inputs_ + params_.size() + constants_.size());
          if (parameters) {
            params_.push_back(in);
          } else {
            constants_.push_back({dims_t(c.dims.begin(), c.dims.end()), c.floats, running_.count(in) > 0});
            if (running_.count(in)) state_.push_back(in);
          }
        }
  }

  // nn.Linear at opset 13, x @ W^T + b: the weight's Transpose that only the MatMul reads is read in place,
  // and the bias that an Add alone gives the product is the product's own (oneDNN's matmul bias). The nodes
  // so taken into a MatMul.
  std::set<std::size_t> linear_layers(const Region& region) {
    std::set<std::size_t> taken_in;
    std::map<std::string, std::size_t> position;
    for (const std::size_t n : region.nodes) position[g_.nodes[n].outputs.at(0)] = n;
    for (const std::size_t n : region.nodes) {
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
        biased_products_.emplace_back(n, position.at(plus.outputs[0]));
      }
    }
    return taken_in;
  }

  bool is_constant(const std::string& v) const { return v.empty() || g_.constants.count(v); }
  bool is_parameter(const std::string& v) const {
    return g_.initializers.count(v) && g_.constants.count(v) && !g_.constants.at(v).integer && !running_.count(v);
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
      // A piece ends in a value that a layer can hand on: of rank 5 at most (MaxViT's window partition is of
      // rank 6 between two reshapes).
      const auto dims = live.size() == 1 ? g_.dims.find(live[0]) : g_.dims.end();
      if (live.size() == 1 && (dims == g_.dims.end() || dims->second.size() <= 5)) {
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

  // The inputs that are tensors an operator computes on: all but those left out (integer constants among them
  // are given as numbers).
  static std::vector<std::size_t> data_inputs(const Node& n) {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty()) out.push_back(i);
    return out;
  }
  int use(const std::string& v, const Node& n) const {
    const auto it = value_.find(v);
    if (it == value_.end()) refuse(n, "reads '" + v + "', which is computed outside this piece");
    return it->second;
  }
  void add(OpSpec o, const std::string& output) {
    ops_.push_back(std::move(o));
    value_[output] = static_cast<int>(inputs_ + params_.size() + constants_.size() + ops_.size() - 1);
    last_output_ = output;
  }

  // The node as an operator: integer constants given as numbers, every other input a value. nn.Linear's
  // x @ W^T + b reads W transposed in place and takes b as the product's own bias.
  void translate(const Node& n) {
    OpSpec o = op_spec(g_, n);
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      const std::string& in = n.inputs[i];
      if (in.empty() || o.integers.count(i)) {
        o.inputs.push_back(-1);
      } else if (n.op == "MatMul" && i == 1 && read_transposed_.count(in)) {
        o.inputs.push_back(use(read_transposed_.at(in), n));
        o.attributes["ddl_transpose_b"].ints = {1};
      } else {
        o.inputs.push_back(use(in, n));
      }
    }
    while (!o.inputs.empty() && o.inputs.back() < 0 && !o.integers.count(o.inputs.size() - 1)) o.inputs.pop_back();
    if (const auto b = with_bias_.find(n.outputs.at(0)); b != with_bias_.end()) {
      o.inputs.push_back(use(b->second.first, n));
      return add(std::move(o), b->second.second);
    }
    add(std::move(o), n.outputs.at(0));
  }

  const Graph& g_;
  const std::map<std::string, std::vector<std::size_t>>& readers_;
  std::map<std::string, std::size_t> producer_;
  const std::set<std::string>& from_parameters_;
  std::map<std::string, std::string> read_transposed_;  // a weight's transpose: the weight, read in place
  std::map<std::string, std::pair<std::string, std::string>> with_bias_;  // a product: its bias, the sum's value
  std::vector<std::pair<std::size_t, std::size_t>> biased_products_;      // such a product's node, its sum's
  // The part being built.
  std::size_t inputs_ = 1;
  std::map<std::string, int> value_;
  std::vector<std::string> params_;
  std::set<std::string> running_;  // BatchNormalization's running statistics
  std::vector<std::string> state_;  // the initializers the running statistics start from, in state() order
  std::vector<GraphConstant> constants_;
  std::vector<OpSpec> ops_;
  std::string last_output_;
};

}  // namespace

std::optional<GraphPiece> graph_piece(const Graph& graph, const std::string& from,
                                      const std::map<std::string, std::vector<std::size_t>>& readers,
                                      const std::set<std::string>& from_parameters,
                                      const std::function<std::uint64_t()>& next_seed, bool cut) {
  return PieceBuilder(graph, readers, from_parameters).build(from, next_seed, cut);
}

}  // namespace ddl::onnx
