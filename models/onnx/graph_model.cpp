#include "models/onnx/graph_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>

#include "core/layers/batch_norm2d.hpp"
#include "core/layers/channel_shuffle.hpp"
#include "core/layers/channel_slice.hpp"
#include "core/layers/concat.hpp"
#include "core/layers/conv2d.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/dropout.hpp"
#include "core/layers/elementwise.hpp"
#include "core/layers/flatten.hpp"
#include "core/layers/gate.hpp"
#include "core/layers/open_block.hpp"
#include "core/layers/pad2d.hpp"
#include "core/layers/pool2d.hpp"
#include "core/layers/relu.hpp"
#include "core/layers/residual.hpp"
#include "models/onnx/fuse_patterns.hpp"
#include "models/onnx/graph_piece.hpp"
#include "models/onnx/message_text.hpp"

namespace ddl {
namespace {

// What Gate multiplies by (core/layers/gate.cpp): factors of the input's own dims, [N, C, 1, 1] or [N, 1, 1, 1].
bool gate_factors(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& factors) {
  if (factors == in) return true;
  return in.size() == 4 && (factors == std::vector<std::int64_t>{in[0], in[1], 1, 1} ||
                            factors == std::vector<std::int64_t>{in[0], 1, 1, 1});
}

using onnx::Node;

// The largest kernel, stride, padding or weight dimension taken: beyond any real network, within int.
constexpr std::int64_t kLargestSize = 1 << 24;

// Whether a Concat joins along the channels of [N, C, H, W].
bool along_channels(const Node& concat) {
  const std::int64_t axis = concat.integer("axis", 1);
  return axis == 1 || axis == -3;
}

// The operators that count as products: what a block must hold more than a share of to be opened.
bool is_product(const Node& n) {
  return n.op == "Conv" || n.op == "ConvTranspose" || n.op == "MatMul" || n.op == "Gemm" || n.op == "Einsum";
}

// A block whose paths hold more than one part in kOpenShare of the graph's products is opened into the
// model's chain (core/layers/open_block.hpp), so that a pipeline may cut between the layers of its longer
// path: a U-Net's skip connections, each around most of the network. ResNet's blocks, each a sixteenth of
// ResNet-50's products or less, stay one layer (a residual block).
constexpr std::size_t kOpenShare = 8;

// Where a value's layers are built: in the model's own chain (a piece there may be cut in parts, a block
// opened), on an opened block's longer path (blocks opened, pieces whole: a stage starting inside the block
// must know its input's dims), or on a path of a block that stays one layer.
enum class Place { chain, opened_path, block };

// A layer being built, with the graph's names for where its parameters and state start from, in the
// order of its param_specs() and state(); "" where a value has no initializer (a dropout's generator).
// `input`: one image's dims of the value it takes, where known.
struct Built {
  std::unique_ptr<Layer> layer;
  std::vector<std::string> params, state;
  dims_t input = {};

  void append_names(const Built& part) {
    params.insert(params.end(), part.params.begin(), part.params.end());
    state.insert(state.end(), part.state.begin(), part.state.end());
  }
};

class Builder {
 public:
  // The graph's weights move into the model's starting values (build): it is built once.
  Builder(onnx::Graph& graph, const ModelConfig& config) : g_(graph), config_(config) {
    for (std::size_t n = 0; n < g_.nodes.size(); ++n) {
      if (is_product(g_.nodes[n])) ++products_;
      bool constant = true;
      for (const std::string& input : g_.nodes[n].inputs)
        if (!input.empty() && !g_.constants.count(input)) {
          readers_[input].push_back(n);
          constant = constant && from_constants_.count(input);
        }
      if (constant) from_constants_.insert(g_.nodes[n].outputs.begin(), g_.nodes[n].outputs.end());
    }
  }

  GraphModel build() {
    GraphModel out;
    out.model =
        std::make_unique<Model>(g_.source, dims_t(g_.image_shape.begin(), g_.image_shape.end()), config_.num_classes);
    std::vector<Built> layers;
    for (std::string v = g_.input; v != g_.output;)
      for (Built& b : step(v, Place::chain))
        if (b.layer) layers.push_back(std::move(b));
    if (layers.empty()) throw InputError(g_.source + ": the graph has no layer between its input and its output");
    out.fresh_classifier = fit_classifier(layers.back());
    auto starting = std::make_shared<Model::StartingValues>();
    // An initializer: the parameters it starts, the first of which took its values.
    std::map<std::string, std::vector<std::string>> readers;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const std::string prefix = std::to_string(i) + ".";
      const auto specs = layers[i].layer->param_specs();
      for (std::size_t k = 0; k < specs.size(); ++k) {
        const std::string& source = layers[i].params.at(k);
        const std::string name = prefix + specs[k].name;
        out.onnx_names[name] = source;
        // A classifier refitted to another class count (fit_classifier) starts from drawn values.
        if (refitted_.count(source)) continue;
        std::vector<std::string>& same = readers[source];
        if (same.empty())
          (*starting)[name] = std::move(g_.constants.at(source).floats);
        else
          (*starting)[name] = starting->at(same.front());  // a weight that two layers share: tied below
        same.push_back(name);
      }
      const auto state = layers[i].layer->state();
      for (std::size_t k = 0; k < state.size(); ++k)
        if (!layers[i].state.at(k).empty()) out.onnx_names[prefix + state[k].name] = layers[i].state[k];
      out.model->add(std::move(layers[i].layer), layers[i].input);
    }
    out.model->set_starting_values(std::move(starting));
    std::vector<std::vector<std::string>> tied;
    for (auto& [source, names] : readers)
      if (names.size() > 1) tied.push_back(std::move(names));
    out.model->tie_parameters(std::move(tied));
    refuse_exporter_names(out.onnx_names);
    return out;
  }

 private:
  // The layers that start at value v (none for an Identity; several for an opened block), v moved on to
  // their output. Where ddl's layers cannot take what follows v, the piece of the graph up to the next value
  // that every path from v passes through becomes GraphLayers (graph_piece.hpp), if they can take it; else
  // the layers' refusal stands.
  std::vector<Built> step(std::string& v, Place place) {
    const std::string from = v;
    std::vector<Built> built;
    try {
      built = layer_or_block(v, place);
    } catch (const InputError&) {
      auto piece = onnx::graph_piece(
          g_, from, readers_, from_constants_, [&] { return layer_seed(config_, random_layers_++); },
          place == Place::chain);
      if (!piece) throw;
      if (piece->end == from) throw InputError(onnx::one_line(g_.source + ": the piece from '" + from + "' computes nothing"));
      v = piece->end;
      built.clear();
      for (auto& part : piece->parts)
        built.push_back({std::move(part.layer), std::move(part.params), std::move(part.state)});
    }
    if (!built.empty() && built.front().input.empty()) built.front().input = image_dims(from);
    return built;
  }
  std::vector<Built> layer_or_block(std::string& v, Place place) {
    const auto& r = readers(v);
    if (r.size() >= 2) return block(v, place);
    if (r.empty())
      throw InputError(onnx::one_line(g_.source + ": value '" + v + "' is read by no node before the output"));
    std::vector<Built> one;
    one.push_back(layer(g_.nodes[r[0]], v));
    return one;
  }
  // One image's dims of value v where folding learned them; else empty.
  dims_t image_dims(const std::string& v) const {
    const auto d = g_.dims.find(v);
    if (d == g_.dims.end() || d->second.empty() || d->second[0] != 1) return {};
    return dims_t(d->second.begin() + 1, d->second.end());
  }

  Built layer(const Node& n, std::string& v) {
    if (data_inputs(n) != 1) refuse(n, "it joins two paths that did not fork from one value before it");
    v = output(n);
    if (n.op == "Identity") return {};
    if (n.op == "Conv") return conv(n, v);
    if (n.op == "BatchNormalization") return batch_norm(n, v);
    if (n.op == "Gemm") return gemm(n, v);
    if (n.op == "Relu") return {std::make_unique<Relu>(), {}, {}};
    if (auto f = eltwise(n)) return {std::move(f), {}, {}};
    if (n.op == "MaxPool" || n.op == "AveragePool") return pool(n);
    if (n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool") {
      // Of another rank (nn.AdaptiveAvgPool1d's [N, C, L]) it is a piece's reduction.
      if (const auto d = g_.dims.find(n.inputs[0]); d != g_.dims.end() && d->second.size() != 4)
        refuse(n, "ddl's pooling layer takes [N, C, H, W]");
      return {std::make_unique<Pool2d>(Pool2dOptions{
                  .kind = n.op == "GlobalMaxPool" ? PoolKind::global_max : PoolKind::global_avg}),
              {},
              {}};
    }
    if (n.op == "ReduceMean") return reduce_mean(n);
    if (n.op == "Flatten") {
      if (n.integer("axis", 1) != 1) refuse(n, "ddl flattens from axis 1 only");
      return {std::make_unique<Flatten>(), {}, {}};
    }
    if (n.op == "Reshape") return reshape(n);
    if (n.op == "Dropout") return dropout(n);
    if (n.op == "Pad") return pad(n);
    if (n.op == "Slice") return channel_slice(n);
    if (n.op == "ChannelShuffle") {
      const auto image = n.integers("image", {});
      return {std::make_unique<ChannelShuffle>(int(n.integer("group", 1)), dims_t(image.begin(), image.end())), {}, {}};
    }
    refuse(n, "ddl does not support this operator (docs/onnx.md lists those it does)");
  }

  // Paths from v that meet in one node. Two in an Add: a residual block, its longer path the body. Two in
  // a Mul, one of them v itself: a gate (squeeze-and-excitation, SiLU). Any number in a Concat along the
  // channels: the paths' outputs side by side, in the node's order (DenseNet's [x, f(x)], Inception's
  // branches).
  std::vector<Built> block(std::string& v, Place place) {
    const Node& join = join_of(v);
    const auto& r = readers(v);
    const std::size_t k = r.size();
    if (join.op == "Concat") {
      if (!along_channels(join)) refuse(join, "ddl concatenates along the channels (axis 1) only");
    } else if (join.op != "Add" && join.op != "Mul") {
      refuse(join, "paths meet here; ddl joins paths in an Add (a residual block), a Mul (a gate) or a Concat only");
    } else if (k != 2) {
      refuse(join, std::to_string(k) + " paths meet here; ddl joins two paths in an Add or a Mul");
    }
    if (join.inputs.size() != k || data_inputs(join) != k || std::set<std::size_t>(r.begin(), r.end()).size() != k)
      refuse(join, "it takes a value twice, a constant, or values that did not fork from one before it");
    const bool open = place != Place::block && k == 2 && (join.op == "Add" || join.op == "Concat") &&
                      products_within(v, join) * kOpenShare > products_;
    std::vector<std::vector<Built>> layers(k);
    std::vector<std::size_t> ends(k);  // where each path's value enters the join
    for (std::size_t p = 0; p < k; ++p) {
      std::string at = v;
      if (&g_.nodes[r[p]] != &join) {  // else the identity
        layers[p].push_back(layer(g_.nodes[r[p]], at));
        layers[p].back().input = image_dims(v);
        while (!reads(join, at))
          for (Built& b : step(at, open ? Place::opened_path : Place::block)) layers[p].push_back(std::move(b));
      }
      std::erase_if(layers[p], [](const Built& b) { return !b.layer; });
      ends[p] = std::find(join.inputs.begin(), join.inputs.end(), at) - join.inputs.begin();
    }
    const std::string from = v;
    v = output(join);
    const int longer = layers[1].size() > layers[0].size() ? 1 : 0;
    if (open && known_dims(layers[longer]) && !image_dims(join.inputs[ends[1 - longer]]).empty() &&
        !image_dims(join.inputs[ends[longer]]).empty())
      return opened(from, join, std::move(layers[longer]), std::move(layers[1 - longer]),
                    ends[1 - longer] < ends[longer], v);
    std::vector<Built> paths(k);
    std::vector<Sequential> chains(k);
    for (std::size_t p = 0; p < k; ++p) chains[p] = chain_of(layers[p], paths[p]);
    if (join.op == "Concat") {
      std::vector<std::size_t> order(k);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ends[a] < ends[b]; });
      Built concat;
      std::vector<Sequential> branches;
      for (std::size_t p : order) {
        concat.append_names(paths[p]);
        branches.push_back(std::move(chains[p]));
      }
      concat.layer = std::make_unique<Concat>("concat", std::move(branches));
      return one(std::move(concat));
    }
    const int body = longer;
    if (join.op == "Mul") {
      if (!chains[1 - body].empty())
        refuse(join, "ddl multiplies a value by factors computed from it (a gate), not two computed values");
      if (auto f = swish(g_.nodes[r[body]], join)) return one({std::move(f), {}, {}});
      // A gate's factors are one an image, one an image and channel, or one an element (Gate's setup); other
      // factors (a mask of each pixel) make a piece.
      const auto in = g_.dims.find(join.inputs[ends[1 - body]]), factors = g_.dims.find(join.inputs[ends[body]]);
      if (in != g_.dims.end() && factors != g_.dims.end() && !gate_factors(in->second, factors->second))
        refuse(join, "its factors are neither one an image, one a channel nor one an element");
      Built gate = std::move(paths[body]);
      gate.layer = std::make_unique<Gate>("gate", std::move(chains[body]));
      return one(std::move(gate));
    }
    const bool relu = fuse_relu(v);
    Built residual;
    residual.append_names(paths[body]);
    residual.append_names(paths[1 - body]);
    residual.layer = std::make_unique<Residual>("residual block" + std::string(relu ? " +relu" : ""),
                                                std::move(chains[body]), std::move(chains[1 - body]), relu);
    return one(std::move(residual));
  }

  static std::vector<Built> one(Built b) {
    std::vector<Built> all;
    all.push_back(std::move(b));
    return all;
  }
  // The layers of a path as one, their names appended to `names`.
  static Sequential chain_of(std::vector<Built>& layers, Built& names) {
    Sequential chain;
    for (Built& b : layers) {
      names.append_names(b);
      chain.add(std::move(b.layer));
    }
    return chain;
  }
  static bool known_dims(const std::vector<Built>& layers) {
    return std::none_of(layers.begin(), layers.end(), [](const Built& b) { return b.input.empty(); });
  }

  // The block from value `from` to `join` opened (core/layers/open_block.hpp): a Fork holding the shorter
  // path, the longer path's layers, and a Join; v is the join's output.
  std::vector<Built> opened(const std::string& from, const Node& join, std::vector<Built> longer,
                            std::vector<Built> shorter, bool side_first, std::string& v) {
    const std::string& side_value = join.inputs[side_first ? 0 : 1];
    auto side = std::make_shared<SideValue>(SideValue{.dims = image_dims(side_value)});
    std::vector<Built> all(1);
    all[0].layer = std::make_unique<Fork>(side, chain_of(shorter, all[0]));
    all[0].input = image_dims(from);
    const dims_t joined = image_dims(join.inputs[side_first ? 1 : 0]);
    for (Built& b : longer) all.push_back(std::move(b));
    JoinKind kind = JoinKind::add;
    if (join.op == "Concat") kind = side_first ? JoinKind::concat_side_first : JoinKind::concat_side_last;
    const bool relu = kind == JoinKind::add && fuse_relu(v);
    all.push_back({std::make_unique<Join>(side, kind, relu), {}, {}, joined});
    return all;
  }

  // The products among the nodes from value v up to `join`: what a block holds.
  std::size_t products_within(const std::string& v, const Node& join) const {
    std::set<std::size_t> seen;
    std::vector<std::size_t> next(readers(v).begin(), readers(v).end());
    std::size_t count = 0;
    while (!next.empty()) {
      const std::size_t n = next.back();
      next.pop_back();
      if (&g_.nodes[n] == &join || !seen.insert(n).second) continue;
      count += is_product(g_.nodes[n]);
      for (const std::string& out : g_.nodes[n].outputs)
        if (const auto r = readers_.find(out); r != readers_.end())
          next.insert(next.end(), r->second.begin(), r->second.end());
    }
    return count;
  }

  // The node where the paths from v meet: the first node with several inputs on each path, past the
  // blocks nested in it.
  const Node& join_of(const std::string& v) {
    const auto& r = readers(v);
    const Node& join = first_join(r[0]);
    for (std::size_t p = 1; p < r.size(); ++p)
      if (const Node& other = first_join(r[p]); &other != &join)
        throw InputError(onnx::one_line(g_.source + ": the paths from value '" + v + "' end in different nodes (" +
                                        join.describe() + ", " + other.describe() +
                                        "); ddl builds blocks of paths that meet in one node"));
    return join;
  }
  const Node& first_join(std::size_t n) {
    for (;;) {
      const Node& node = g_.nodes[n];
      if (data_inputs(node) >= 2) return node;
      std::string out = output(node);
      while (readers(out).size() >= 2) out = output(join_of(out));
      if (readers(out).size() != 1) refuse(node, "its path ends before it meets the path it forked from");
      n = readers(out)[0];
    }
  }

  Built conv(const Node& n, std::string& v) {
    const onnx::Constant& w = weights(n, 1, 0);
    if (w.dims.size() != 4) refuse(n, "its weight is not [out, in, kh, kw]");
    const auto kernel = square(n, w.dims[2], w.dims[3], "kernel");
    const auto d = n.integers("dilations", {1, 1});
    if (d.size() != 2) refuse(n, "its dilations are not two values");
    const std::int64_t groups = n.integer("group", 1);
    if (groups <= 0 || groups > kLargestSize || w.dims[0] % groups != 0)
      refuse(n, "its " + std::to_string(groups) + " groups do not divide its " + std::to_string(w.dims[0]) +
                    " output channels");
    if (w.dims[1] * groups > kLargestSize) refuse(n, "its input channels are out of range");
    const bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
    if (bias) weights(n, 2, std::size_t(w.dims[0]));
    Conv2dOptions o{.in_channels = int(w.dims[1] * groups),  // the weight holds one group's inputs
                    .out_channels = int(w.dims[0]),
                    .kernel = kernel,
                    .stride = stride(n),
                    .dilation = square(n, d[0], d[1], "dilation"),
                    .groups = int(groups),
                    .bias = bias};
    // Padding that differs between sides, or auto_pad SAME, is a padding layer before the convolution.
    const auto pad_first = conv_padding(n, o);
    o.relu = fuse_relu(v);
    Built b{std::make_unique<Conv2d>(o), {n.inputs[1]}, {}};
    if (bias) b.params.push_back(n.inputs[2]);
    if (pad_first) {
      auto padded = std::make_unique<Sequential>("padded convolution");
      padded->emplace<Pad2d>(*pad_first);
      padded->add(std::move(b.layer));
      b.layer = std::move(padded);
    }
    return b;
  }

  // The convolution's own padding (o.padding) where every side has the same, else the padding layer to put
  // before it.
  std::optional<Pad2dOptions> conv_padding(const Node& n, Conv2dOptions& o) const {
    const std::string auto_pad = n.text("auto_pad", "NOTSET");
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
      return Pad2dOptions{.same_kernel = o.kernel, .same_stride = o.stride, .same_dilation = o.dilation,
                          .same_lower = auto_pad == "SAME_LOWER"};
    if (auto_pad == "VALID") return std::nullopt;
    if (auto_pad != "NOTSET") refuse(n, "its auto_pad " + auto_pad + " is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
    const auto p = n.integers("pads", {0, 0, 0, 0});
    if (p.size() != 4) refuse(n, "its pads are not four values");
    for (const auto side : p)
      if (side < 0 || side > kLargestSize) refuse(n, "its padding " + std::to_string(side) + " is out of range");
    if (p[0] == p[1] && p[0] == p[2] && p[0] == p[3]) {
      o.padding = int(p[0]);
      return std::nullopt;
    }
    return Pad2dOptions{.top = int(p[0]), .left = int(p[1]), .bottom = int(p[2]), .right = int(p[3])};
  }

  Built batch_norm(const Node& n, std::string& v) {
    const onnx::Constant& scale = weights(n, 1, 0);
    for (std::size_t i = 2; i < 5; ++i) weights(n, i, scale.size());
    // ONNX's momentum weighs the running value, PyTorch's and ddl's the batch's.
    BatchNorm2dOptions o{.channels = int(scale.size()),
                         .epsilon = n.real("epsilon", 1e-5f),
                         .momentum = 1.0f - n.real("momentum", 0.9f)};
    o.relu = fuse_relu(v);
    auto layer = std::make_unique<BatchNorm2d>(o);
    auto state = layer->state();  // running mean and variance: the layer's own, set here once
    for (std::size_t k = 0; k < 2; ++k) {
      const auto& from = constant(n, 3 + k).floats;
      std::copy(from.begin(), from.end(), state[k].floats.begin());
    }
    return {std::move(layer), {n.inputs[1], n.inputs[2]}, {n.inputs[3], n.inputs[4]}};
  }

  Built gemm(const Node& n, std::string& v) {
    const onnx::Constant& w = weights(n, 1, 0);
    if (n.integer("transA", 0) != 0 || n.integer("transB", 0) != 1 || n.real("alpha", 1) != 1 || n.real("beta", 1) != 1)
      refuse(n, "ddl takes a Gemm as PyTorch's Linear exports it (transB = 1, transA = 0, alpha = beta = 1)");
    if (w.dims.size() != 2) refuse(n, "its weight is not [out, in]");
    const bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
    if (bias) weights(n, 2, std::size_t(w.dims[0]));
    DenseOptions o{.in_features = int(w.dims[1]), .out_features = int(w.dims[0]), .bias = bias};
    o.relu = fuse_relu(v);
    Built b{std::make_unique<Dense>(o), {n.inputs[1]}, {}};
    if (bias) b.params.push_back(n.inputs[2]);
    return b;
  }

  Built pool(const Node& n) {
    const auto k = n.integers("kernel_shape", {});
    if (k.size() != 2) refuse(n, "its kernel_shape is not two values");
    if (n.text("auto_pad", "NOTSET") != "NOTSET") refuse(n, "auto_pad is not supported yet; give explicit pads");
    for (auto d : n.integers("dilations", {1, 1}))
      if (d != 1) refuse(n, "dilated pooling is not supported");
    PoolKind kind = PoolKind::max;
    // Without padding both averages divide alike, and excluding it also takes ceil_mode's last window.
    if (n.op == "AveragePool")
      kind = n.integer("count_include_pad", 0) && padding(n) > 0 ? PoolKind::avg_include_padding
                                                                 : PoolKind::avg_exclude_padding;
    return {std::make_unique<Pool2d>(Pool2dOptions{.kind = kind,
                                                   .kernel = square(n, k[0], k[1], "kernel"),
                                                   .stride = stride(n),
                                                   .padding = padding(n),
                                                   .ceil_mode = n.integer("ceil_mode", 0) != 0}),
            {},
            {}};
  }

  // x.mean([2, 3]): a global average pooling, flattened unless the dimensions are kept.
  Built reduce_mean(const Node& n) {
    auto axes = n.integers("axes", {});
    for (auto& a : axes) a = a < 0 ? a + 4 : a;
    std::sort(axes.begin(), axes.end());
    if (axes != std::vector<std::int64_t>{2, 3}) refuse(n, "ddl takes a ReduceMean over the plane (axes 2 and 3) only");
    auto pool = std::make_unique<Pool2d>(Pool2dOptions{.kind = PoolKind::global_avg});
    if (n.integer("keepdims", 1)) return {std::move(pool), {}, {}};
    auto flattened = std::make_unique<Sequential>("mean over the plane");
    flattened->add(std::move(pool));
    flattened->emplace<Flatten>();
    return {std::move(flattened), {}, {}};
  }

  // The functions applied to each element, on oneDNN's eltwise primitives; null for another operator.
  std::unique_ptr<Layer> eltwise(const Node& n) const {
    using dnnl::algorithm;
    if (n.op == "Sigmoid") return std::make_unique<Eltwise>("sigmoid", algorithm::eltwise_logistic);
    if (n.op == "Tanh") return std::make_unique<Eltwise>("tanh", algorithm::eltwise_tanh);
    if (n.op == "Mish") return std::make_unique<Eltwise>("mish", algorithm::eltwise_mish);  // fuse_patterns.hpp
    // x * min(max(x / 6 + 1 / 2, 0), 1): oneDNN 3 takes the 1/6 and 1/2 as alpha and beta, 2.6 ignores them.
    if (n.op == "HardSwish")
      return std::make_unique<Eltwise>("hard swish", algorithm::eltwise_hardswish, 1.0f / 6, 0.5f);
    if (n.op == "LeakyRelu")
      return std::make_unique<Eltwise>("leaky relu", algorithm::eltwise_relu, n.real("alpha", 0.01f));
    if (n.op == "Clip") {  // since opset 11 its bounds are inputs
      const float low = number(n, 1, -std::numeric_limits<float>::max(), "bound");
      const float high = number(n, 2, std::numeric_limits<float>::max(), "bound");
      char name[64];
      std::snprintf(name, sizeof name, "clip %g..%g", low, high);
      return std::make_unique<Eltwise>(name, algorithm::eltwise_clip_v2, low, high);
    }
    if (n.op == "HardSigmoid") {  // max(0, min(1, alpha x + beta)): oneDNN 2.6 has no such algorithm
      Sequential s("hard sigmoid");
      s.emplace<Eltwise>("linear", algorithm::eltwise_linear, n.real("alpha", 0.2f), n.real("beta", 0.5f));
      s.emplace<Eltwise>("clip", algorithm::eltwise_clip_v2, 0.0f, 1.0f);
      return std::make_unique<Sequential>(std::move(s));
    }
    return nullptr;
  }
  // SiLU and hard swish as PyTorch 1.13 exports them, x * Sigmoid(x) and x * HardSigmoid(x) (alpha 1/6, beta
  // 1/2): one oneDNN eltwise, which keeps x alone for backward where the gate keeps x and the factors.
  std::unique_ptr<Layer> swish(const Node& factor, const Node& join) const {
    using dnnl::algorithm;
    if (!reads(join, output(factor))) return nullptr;
    if (factor.op == "Sigmoid") return std::make_unique<Eltwise>("silu", algorithm::eltwise_swish, 1.0f);
    if (factor.op == "HardSigmoid" && std::abs(factor.real("alpha", 0.2f) - 1.0f / 6) < 1e-7f &&
        factor.real("beta", 0.5f) == 0.5f)
      return std::make_unique<Eltwise>("hard swish", algorithm::eltwise_hardswish, 1.0f / 6, 0.5f);
    return nullptr;
  }
  // The one real number given as input `input` (a Clip's bound, a Pad's value), `otherwise` where none is.
  float number(const Node& n, std::size_t input, float otherwise, const std::string& what) const {
    if (input >= n.inputs.size() || n.inputs[input].empty()) return otherwise;
    const onnx::Constant& c = constant(n, input);
    if (c.integer || c.size() != 1) refuse(n, "its " + what + " is not one number");
    return c.floats[0];
  }

  // A Reshape that keeps the batch and flattens the rest: torch's x.view(x.size(0), -1).
  Built reshape(const Node& n) {
    const onnx::Constant& shape = constant(n, 1);
    const bool batch_first = shape.ints.size() == 2 && (shape.ints[0] == onnx::kBatch || shape.ints[0] == 0);
    if (!batch_first || shape.ints[1] == 0 || shape.ints[1] < -1)
      refuse(n, "ddl takes a Reshape that keeps the batch and flattens the rest (x.view(x.size(0), -1)) only");
    return {std::make_unique<Flatten>(), {}, {}};
  }

  // Channels from a start to an end (ShuffleNet's x.chunk(2, dim=1), or a Split's part): axis 1, step 1,
  // bounds counted from the front. Other slices are a piece's (graph_piece.hpp).
  Built channel_slice(const Node& n) {
    const auto one = [&](std::size_t input, std::int64_t otherwise) {
      if (input >= n.inputs.size() || n.inputs[input].empty()) return otherwise;
      const onnx::Constant& c = constant(n, input);
      return c.integer && c.ints.size() == 1 ? c.ints[0] : std::int64_t{-1};
    };
    const std::int64_t begin = one(1, -1), end = one(2, -1);
    if (one(3, 0) != 1 || one(4, 1) != 1 || begin < 0 || begin > kLargestSize || end <= begin)
      refuse(n, "ddl takes a Slice here of channels (axis 1, step 1, bounds from the front); other slices in a piece "
                "of N-d operations (docs/onnx.md)");
    // ONNX clamps an end past the channels: x[:, 12:] exports as the largest int64.
    return {std::make_unique<ChannelSlice>(begin, end < kLargestSize ? std::optional<dnnl::memory::dim>(end) : std::nullopt),
            {},
            {}};
  }

  // ONNX's Pad in constant mode of the rows and columns of [N, C, H, W] images (F.pad, nn.ZeroPad2d,
  // nn.ConstantPad2d); nothing where it pads nothing, as PyTorch exports one before avg_pool2d.
  Built pad(const Node& n) {
    const onnx::Constant& pads = constant(n, 1);
    const std::string mode = n.text("mode", "constant");
    if (mode != "constant") refuse(n, "ddl pads with a constant, not in " + mode + " mode");
    if (n.inputs.size() > 3 && !n.inputs[3].empty()) refuse(n, "ddl takes a Pad of every axis, without axes");
    const auto& p = pads.ints;
    if (!pads.integer || p.size() != 8 || p[0] != 0 || p[1] != 0 || p[4] != 0 || p[5] != 0)
      refuse(n, "ddl pads the rows and columns of [N, C, H, W] images only");
    for (const auto side : p)
      if (side < 0 || side > kLargestSize)
        refuse(n, "its padding " + std::to_string(side) +
                      (side < 0 ? ": ddl pads, it does not crop" : " is out of range"));
    const float value = number(n, 2, 0.0f, "value");
    if (std::all_of(p.begin(), p.end(), [](std::int64_t side) { return side == 0; })) return {};
    return {std::make_unique<Pad2d>(Pad2dOptions{
                .top = int(p[2]), .left = int(p[3]), .bottom = int(p[6]), .right = int(p[7]), .value = value}),
            {},
            {}};
  }

  Built dropout(const Node& n) {
    float ratio = n.real("ratio", 0.5f);  // before opset 12 an attribute, since then an input
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
      const onnx::Constant& given = constant(n, 1);
      if (given.size() != 1 || given.integer) refuse(n, "its ratio is not one number");
      ratio = given.floats[0];
    }
    // ONNX's training_mode is false where the node leaves it out: the input as it is (PyTorch's training
    // export sets it).
    if (n.inputs.size() < 3 || n.inputs[2].empty() || constant(n, 2).ints != std::vector<std::int64_t>{1}) return {};
    if (!(ratio >= 0.0f && ratio < 1.0f)) refuse(n, "its ratio " + std::to_string(ratio) + " is not in [0, 1)");
    return {std::make_unique<Dropout>(ratio, layer_seed(config_, random_layers_++)), {}, {""}};
  }

  // Where the run's classes differ from the graph's: the final Gemm built anew for the run's, to start
  // from drawn values (its names returned; they stay its names for export); anything else cannot be
  // trained on this data.
  std::string fit_classifier(Built& last) {
    auto* dense = dynamic_cast<Dense*>(last.layer.get());
    const std::int64_t classes = dense ? dense->options().out_features : g_.classes;
    if (classes == config_.num_classes) return "";
    if (!dense)
      throw InputError(g_.source + ": the graph gives " + std::to_string(classes) + " classes and the data has " +
                       std::to_string(config_.num_classes) +
                       "; ddl replaces a final Gemm (a fully connected layer) "
                       "only, and this graph ends otherwise");
    DenseOptions o = dense->options();
    o.out_features = config_.num_classes;
    last.layer = std::make_unique<Dense>(o);
    std::string fresh;
    for (const auto& p : last.params) {
      refitted_.insert(p);
      fresh += (fresh.empty() ? "" : ", ") + p;
    }
    return fresh;
  }

  // PyTorch names a trained tensor after its module's parameter ("layer1.0.bn1.weight"); a name the exporter
  // made ("onnx::Conv_26") means it computed the tensor: an eval-mode export folds each BatchNorm into the
  // convolution before it, and constant folding transposes weights into new ones. Trained, such a graph is
  // another network whose weights would not load back into the module.
  void refuse_exporter_names(const std::map<std::string, std::string>& onnx_names) const {
    for (const auto& [ddl_name, source] : onnx_names) {
      if (source.rfind("onnx::", 0) != 0) continue;
      const auto reader = std::find_if(g_.nodes.begin(), g_.nodes.end(), [&](const Node& n) { return reads(n, source); });
      const std::string where = reader == g_.nodes.end() ? "" : reader->describe() + ": ";
      throw InputError(onnx::one_line(
          g_.source + ": " + where + "its trained tensor '" + source +
          "' has a name the exporter made, not the module's: the file was exported in eval mode (BatchNorms folded "
          "into convolutions) or with constant folding, and would train as another network; export with "
          "model.train(), training=torch.onnx.TrainingMode.TRAINING and do_constant_folding=False (as "
          "launch/export_onnx.py does)"));
    }
  }

  // Whether the value v is read only by a Relu, which is then fused: v moves on to the Relu's output.
  bool fuse_relu(std::string& v) {
    const auto& r = readers(v);
    if (r.size() != 1 || g_.nodes[r[0]].op != "Relu" || v == g_.output) return false;
    v = output(g_.nodes[r[0]]);
    return true;
  }

  int stride(const Node& n) const {
    const auto s = n.integers("strides", {1, 1});
    if (s.size() != 2) refuse(n, "its strides are not two values");
    return square(n, s[0], s[1], "stride");
  }
  int padding(const Node& n) const {
    const auto p = n.integers("pads", {0, 0, 0, 0});
    if (p.size() != 4 || p[0] != p[1] || p[0] != p[2] || p[0] != p[3])
      refuse(n, "ddl pads every side of an image alike (pads " + list(p) + ")");
    if (p[0] < 0 || p[0] > kLargestSize) refuse(n, "its padding " + std::to_string(p[0]) + " is out of range");
    return int(p[0]);
  }
  int square(const Node& n, std::int64_t a, std::int64_t b, const std::string& what) const {
    if (a != b || a <= 0 || a > kLargestSize)
      refuse(n, "ddl takes a square " + what + ", not " + std::to_string(a) + "x" + std::to_string(b));
    return int(a);
  }
  static std::string list(const std::vector<std::int64_t>& v) {
    std::string s;
    for (auto x : v) {
      if (!s.empty()) s += ',';
      s += std::to_string(x);
    }
    return s;
  }

  // A float initializer of `count` values (any count where 0) with every dimension in range: a weight,
  // bias or statistic.
  const onnx::Constant& weights(const Node& n, std::size_t input, std::size_t count) const {
    const onnx::Constant& c = constant(n, input);
    if (c.integer) refuse(n, "its input '" + n.inputs[input] + "' holds integers, not weights");
    if (count != 0 && c.size() != count)
      refuse(n, "its input '" + n.inputs[input] + "' holds " + std::to_string(c.size()) + " values, not " +
                    std::to_string(count));
    for (auto d : c.dims)
      if (d <= 0 || d > kLargestSize)
        refuse(n, "its input '" + n.inputs[input] + "' has a dimension of " + std::to_string(d));
    return c;
  }
  const std::string& output(const Node& n) const {
    if (n.outputs.empty() || n.outputs[0].empty()) refuse(n, "it has no output");
    return n.outputs[0];
  }

  const onnx::Constant& constant(const Node& n, std::size_t input) const {
    if (input >= n.inputs.size() || n.inputs[input].empty())
      refuse(n, "input " + std::to_string(input) + " is missing");
    const auto it = g_.constants.find(n.inputs[input]);
    if (it == g_.constants.end())
      refuse(n,
             "its input '" + n.inputs[input] + "' is computed; ddl takes weights, shapes and ratios as initializers");
    return it->second;
  }
  // A value computed from constants and parameters alone (nn.Linear's weight transposed, at opset 13) is no
  // path: the MatMul that reads it continues its input's path.
  std::size_t data_inputs(const Node& n) const {
    std::size_t count = 0;
    for (const auto& input : n.inputs)
      count += !input.empty() && !g_.constants.count(input) && !from_constants_.count(input);
    return count;
  }
  bool reads(const Node& n, const std::string& v) const {
    return std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end();
  }
  const std::vector<std::size_t>& readers(const std::string& v) const {
    static const std::vector<std::size_t> none;
    const auto it = readers_.find(v);
    return it == readers_.end() ? none : it->second;
  }
  [[noreturn]] void refuse(const Node& n, const std::string& why) const {
    throw InputError(onnx::one_line(g_.source + ": " + n.describe() + ": " + why));
  }

  onnx::Graph& g_;
  const ModelConfig& config_;
  std::map<std::string, std::vector<std::size_t>> readers_;  // a value: the nodes that read it
  std::set<std::string> from_constants_;  // values computed from constants and parameters alone
  std::set<std::string> refitted_;  // the initializers of a classifier built for another class count
  std::uint64_t random_layers_ = 0;
  std::size_t products_ = 0;  // the graph's (is_product)
};

// DenseNet as PyTorch exports it concatenates every earlier feature map again in each layer:
// Concat(x), Concat(x, f1), Concat(x, f1, f2), ... Each is the one before with one more value, so it is
// rewritten as Concat(the one before, f2); a Concat of one value is that value. What is left are forks
// that meet in a Concat of two, which the builder takes as blocks.
void chain_concats(onnx::Graph& g) {
  std::map<std::string, std::string> same;                    // a value: the value it equals
  std::map<std::vector<std::string>, std::string> concat_of;  // the inputs of a Concat: its output
  std::vector<Node> kept;
  for (Node& n : g.nodes) {
    for (auto& input : n.inputs)
      if (same.count(input)) input = same.at(input);
    if (n.op == "Concat" && along_channels(n) && !n.outputs.empty()) {
      if (n.inputs.size() == 1) {
        same[n.outputs[0]] = n.inputs[0];
        continue;
      }
      concat_of[n.inputs] = n.outputs[0];
      const std::vector<std::string> before(n.inputs.begin(), n.inputs.end() - 1);
      if (const auto it = concat_of.find(before); it != concat_of.end()) n.inputs = {it->second, n.inputs.back()};
    }
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  if (same.count(g.output)) g.output = same.at(g.output);
}

// Read, checked and rewritten once: what every model made from the graph starts from.
std::shared_ptr<const onnx::Graph> prepared_graph(const std::string& bytes, const std::string& source,
                                                  const std::set<std::string>& weights_elsewhere) {
  auto graph = std::make_shared<onnx::Graph>(onnx::parse_onnx(bytes, source, weights_elsewhere));
  onnx::fold_constants(*graph);
  chain_concats(*graph);
  onnx::fuse_norms_and_activations(*graph);
  onnx::fuse_channel_shuffles(*graph);
  onnx::split_into_slices(*graph);
  return graph;
}

}  // namespace

GraphModel define_graph_model(const std::string& name, const ModelConfig& config) {
  if (!config.graph || !config.graph->prepared) throw Error(name + ": a graph model needs the graph read first");
  onnx::Graph graph = *config.graph->prepared;  // the builder moves the weights out of its copy
  graph.source = std::filesystem::path(name).filename().string();
  return Builder(graph, config).build();
}

bool is_graph_file(const std::string& model) {
  return model.size() > 5 && model.compare(model.size() - 5, 5, ".onnx") == 0;
}

std::shared_ptr<const GraphBytes> read_graph_file(const std::string& path) {
  auto graph = std::make_shared<GraphBytes>();
  try {
    graph->bytes = onnx::read_onnx_bytes(path);
  } catch (const InputError& e) {
    throw InputError(std::string("--model ") + e.what());
  }
  graph->prepared = prepared_graph(graph->bytes, std::filesystem::path(path).filename().string(), {});
  return graph;
}

std::shared_ptr<const GraphBytes> graph_without_weights(std::string bytes, const std::vector<std::string>& graph_names,
                                                        const std::string& source) {
  auto graph = std::make_shared<GraphBytes>();
  graph->bytes = std::move(bytes);
  for (const auto& pair : graph_names) graph->weights_elsewhere.insert(pair.substr(pair.find('=') + 1));
  graph->prepared =
      prepared_graph(graph->bytes, std::filesystem::path(source).filename().string(), graph->weights_elsewhere);
  return graph;
}

}  // namespace ddl
