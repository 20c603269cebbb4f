// models/onnx/: a graph read as torch.onnx.export writes it; every refusal in its one line; damaged bytes
// refused, never a crash; the shape arithmetic folded for any batch; weights stripped and read back as zeros.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <unistd.h>

#include "core/error.hpp"
#include "models/onnx/fuse_patterns.hpp"
#include "models/onnx/graph_model.hpp"
#include "models/onnx/onnx_graph.hpp"
#include "tests/models/onnx_builder.hpp"

namespace ddl::onnx {
namespace {

using namespace ddl::onnx_test;

// The message of the InputError that `f` throws, or "no error".
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::string parse_error(const pb::ModelProto& m) {
  return error_of([&] { parse_onnx(bytes_of(m), "m.onnx"); });
}

std::string fold_error(const pb::ModelProto& m) {
  return error_of([&] {
    Graph g = parse_onnx(bytes_of(m), "m.onnx");
    fold_constants(g);
  });
}

std::vector<std::string> ops_of(const Graph& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes) ops.push_back(n.op);
  return ops;
}

TEST(OnnxGraph, ReadsAGraphAsTorchWritesIt) {
  const Graph g = parse_onnx(bytes_of(tiny_cnn()), "tiny.onnx");
  EXPECT_EQ(g.source, "tiny.onnx");
  EXPECT_EQ(g.opset, 13);
  EXPECT_EQ(g.producer, "pytorch 1.13.0");
  EXPECT_EQ(g.input, "input");
  EXPECT_EQ(g.output, "logits");
  EXPECT_EQ(g.image_shape, (std::vector<std::int64_t>{3, 8, 8}));
  EXPECT_EQ(g.classes, 10);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Conv", "Relu", "GlobalAveragePool", "Flatten", "Gemm"}));
  const Node& conv = g.nodes[0];
  EXPECT_EQ(conv.name, "/conv/Conv");
  EXPECT_EQ(conv.inputs, (std::vector<std::string>{"input", "conv.weight", "conv.bias"}));
  EXPECT_EQ(conv.outputs, (std::vector<std::string>{"conv"}));
  EXPECT_EQ(conv.integers("pads", {}), (std::vector<std::int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(conv.integers("strides", {1, 1}), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(conv.integer("group", 1), 1);
  EXPECT_EQ(g.nodes[4].integer("transB", 0), 1);
  EXPECT_EQ(g.initializers, (std::set<std::string>{"conv.weight", "conv.bias", "fc.weight", "fc.bias"}));
  ASSERT_EQ(g.constants.size(), 4u);
  const Constant& weight = g.constants.at("conv.weight");  // raw_data
  EXPECT_EQ(weight.dims, (std::vector<std::int64_t>{4, 3, 3, 3}));
  EXPECT_FALSE(weight.integer);
  ASSERT_EQ(weight.floats.size(), 108u);
  EXPECT_EQ(weight.size(), 108u);
  EXPECT_FLOAT_EQ(weight.floats[18], 0.01f);
  const Constant& bias = g.constants.at("conv.bias");  // float_data
  EXPECT_EQ(bias.floats, (std::vector<float>{0.f, 0.01f, 0.02f, 0.03f}));
}

// The conv weight's 108 floats kept at `offset` of `location` beside the model (onnx.save's
// save_as_external_data), its data file written with `data` bytes first.
std::string external_model(const std::string& folder, const std::string& location, std::int64_t offset,
                           std::size_t data_bytes) {
  auto m = tiny_cnn();
  for (auto& t : *m.mutable_graph()->mutable_initializer()) {
    if (t.name() != "conv.weight") continue;
    std::string weights = t.raw_data();
    weights.insert(0, std::string(offset, 'x'));
    std::ofstream(folder + "/weights.bin", std::ios::binary).write(weights.data(), std::min(data_bytes, weights.size()));
    t.clear_raw_data();
    t.set_data_location(pb::TensorProto::EXTERNAL);
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"location", location},
                                     {"offset", std::to_string(offset)}, {"length", "432"}}) {
      auto* entry = t.add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
  }
  const std::string path = folder + "/m.onnx";
  std::ofstream(path, std::ios::binary) << bytes_of(m);
  return path;
}

TEST(OnnxGraph, ReadsWeightsKeptInAFileBesideTheModel) {
  const auto folder = std::filesystem::temp_directory_path() / ("ddl_external_" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  const std::string dir = folder.string();
  const Graph g = parse_onnx(read_onnx_bytes(external_model(dir, "weights.bin", 16, 1000)), "m.onnx");
  const Graph inline_weights = parse_onnx(bytes_of(tiny_cnn()), "m.onnx");
  EXPECT_EQ(g.constants.at("conv.weight").floats, inline_weights.constants.at("conv.weight").floats);
  const auto read_error = [&](const std::string& location, std::size_t data_bytes) {
    const std::string path = external_model(dir, location, 16, data_bytes);
    return error_of([&] { read_onnx_bytes(path); }).substr(path.size());
  };
  EXPECT_EQ(read_error("../weights.bin", 1000),
            ": initializer 'conv.weight' keeps its data in '../weights.bin', not in a file of the model's folder "
            "(ONNX's external data is relative to it)");
  EXPECT_EQ(read_error("weights.bin", 100),
            ": initializer 'conv.weight' lies past the end of its data file " + dir + "/weights.bin (100 bytes): truncated?");
  EXPECT_NE(read_error("missing.bin", 1000).find("'s data file " + dir + "/missing.bin cannot be opened"), std::string::npos);
  std::filesystem::remove_all(folder);
}

// The graph is read, checked and rewritten once, when its file is read: each model made copies it, and the
// bytes are not parsed again (here they are replaced by garbage after reading).
TEST(OnnxGraph, IsReadOnceAJobAndCopiedForEachModel) {
  const auto path = std::filesystem::temp_directory_path() / ("ddl_once_" + std::to_string(::getpid()) + ".onnx");
  std::ofstream(path, std::ios::binary) << bytes_of(tiny_cnn());
  const auto read = read_graph_file(path.string());
  std::filesystem::remove(path);
  ASSERT_NE(read->prepared, nullptr);
  auto garbage = std::make_shared<GraphBytes>(GraphBytes{"not an ONNX file", {}, read->prepared});
  ModelConfig config;
  config.graph = garbage;
  const GraphModel first = define_graph_model("tiny.onnx", config), second = define_graph_model("tiny.onnx", config);
  EXPECT_EQ(first.model->num_layers(), second.model->num_layers());
  EXPECT_EQ(first.onnx_names, second.onnx_names);
  EXPECT_FALSE(first.onnx_names.empty());
  // The prepared graph keeps its weights: the second model started from them as the first did.
  EXPECT_FALSE(read->prepared->constants.at("conv.weight").floats.empty());
}

TEST(OnnxGraph, NamesNodesAndAttributesInMessages) {
  auto m = tiny_cnn();
  m.mutable_graph()->mutable_node(1)->clear_name();
  const Graph g = parse_onnx(bytes_of(m), "tiny.onnx");
  EXPECT_EQ(g.nodes[1].name, "Relu_1");
  EXPECT_EQ(g.nodes[1].describe(), "Relu node 'Relu_1'");
  EXPECT_EQ(g.nodes[0].describe(), "Conv node in module conv (/conv/Conv)");
  Node n{"Conv", "/layer1/layer1.0/conv1/Conv", {}, {}, {}};
  EXPECT_EQ(n.describe(), "Conv node in module layer1.0.conv1 (/layer1/layer1.0/conv1/Conv)");
  EXPECT_EQ((Node{"ReduceMax", "/l1/sa/ReduceMax", {}, {}, {}}.describe()), "ReduceMax node in module l1.sa (/l1/sa/ReduceMax)");
  EXPECT_EQ((Node{"Cos", "/blocks.0/Cos", {}, {}, {}}.describe()), "Cos node in module blocks.0 (/blocks.0/Cos, torch.cos)");
  EXPECT_EQ((Node{"CumSum", "/CumSum", {}, {}, {}}.describe()), "CumSum node in the network's own forward (/CumSum, torch.cumsum)");
  EXPECT_EQ(error_of([&] { g.nodes[0].integer("pads", 0); }),
            "Conv node in module conv (/conv/Conv): attribute 'pads' is not an integer");
  EXPECT_EQ(g.nodes[0].text("auto_pad", "NOTSET"), "NOTSET");
  EXPECT_EQ(g.nodes[0].real("alpha", 0.5f), 0.5f);
}

TEST(OnnxGraph, RefusesWhatIsNotAnOnnxModel) {
  EXPECT_EQ(error_of([] { parse_onnx("a text file, not a model\n", "x.onnx"); }),
            "x.onnx: not an ONNX file, or a truncated one (protobuf cannot read it as a model)");
  EXPECT_EQ(error_of([] { parse_onnx("", "x.onnx"); }), "x.onnx: not an ONNX file (it holds no graph)");
  auto m = tiny_cnn();
  m.mutable_opset_import(0)->set_version(11);
  EXPECT_EQ(parse_error(m),
            "m.onnx: opset 11 outside 13-17, the opsets ddl reads (torch.onnx.export(..., opset_version=17), and "
            "dynamo=False from PyTorch 2.9 on)");
  m.mutable_opset_import(0)->set_version(18);
  EXPECT_EQ(parse_error(m).substr(0, 28), "m.onnx: opset 18 outside 13-");
  m.mutable_opset_import(0)->set_domain("ai.onnx.ml");
  EXPECT_EQ(parse_error(m), "m.onnx: imports no opset of ONNX's default domain");
}

TEST(OnnxGraph, RefusesInputsOtherThanOneImageBatch) {
  auto m = tiny_cnn();
  *m.mutable_graph()->add_input() = value_info("labels", {kFree});
  EXPECT_EQ(parse_error(m),
            "m.onnx: has 2 inputs besides its initializers; ddl trains a graph of one image input [batch, C, H, W]");
  // Initializers listed among the inputs, as older exporters write them, are not inputs.
  m = tiny_cnn();
  *m.mutable_graph()->add_input() = value_info("conv.bias", {4});
  EXPECT_EQ(parse_error(m), "no error");
  m.mutable_graph()->mutable_input()->DeleteSubrange(0, 1);
  EXPECT_EQ(parse_error(m),
            "m.onnx: has 0 inputs besides its initializers; ddl trains a graph of one image input "
            "[batch, C, H, W]");

  m = tiny_cnn();
  *m.mutable_graph()->mutable_input(0) = value_info("input", {kFree, 3, 8});
  EXPECT_EQ(parse_error(m), "m.onnx: input 'input' has rank 3; ddl trains a graph of one image input [batch, C, H, W]");
  *m.mutable_graph()->mutable_input(0) = value_info("input", {kFree, 3, 8, kFree});
  EXPECT_EQ(parse_error(m),
            "m.onnx: input 'input''s W (dimension 3) is not fixed; ddl needs C, H and W fixed "
            "(give dynamic_axes the batch only)");
  *m.mutable_graph()->mutable_input(0) = value_info("input", {kFree, 0, 8, 8});
  EXPECT_EQ(parse_error(m),
            "m.onnx: input 'input''s C (dimension 1) is not fixed; ddl needs C, H and W fixed "
            "(give dynamic_axes the batch only)");
  // A fixed batch, as torch writes it without dynamic_axes, is any batch to ddl.
  *m.mutable_graph()->mutable_input(0) = value_info("input", {1, 3, 8, 8});
  EXPECT_EQ(parse_error(m), "no error");
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::UINT8);
  EXPECT_EQ(parse_error(m), "m.onnx: input 'input' is of type UINT8, not FLOAT");
}

TEST(OnnxGraph, RefusesOutputsOtherThanOneOfLogits) {
  auto m = tiny_cnn();
  *m.mutable_graph()->add_output() = value_info("conv", {kFree, 4, 8, 8});
  EXPECT_EQ(parse_error(m), "m.onnx: has 2 outputs; ddl trains a graph of one output [batch, classes]");
  m = tiny_cnn();
  *m.mutable_graph()->mutable_output(0) = value_info("logits", {kFree, 10, 1});
  EXPECT_EQ(parse_error(m), "m.onnx: output 'logits' is not [batch, classes]: rank 3");
  *m.mutable_graph()->mutable_output(0) = value_info("logits", {kFree, kFree});
  EXPECT_EQ(parse_onnx(bytes_of(m), "m.onnx").classes, 0);
  *m.mutable_graph()->mutable_output(0) = value_info("scores", {kFree, 10});
  EXPECT_EQ(parse_error(m), "m.onnx: output 'scores' comes from no node");
}

TEST(OnnxGraph, RefusesNodesWhoseInputsNothingGives) {
  auto m = tiny_cnn();
  m.mutable_graph()->mutable_node(1)->set_input(0, "conv_out");
  EXPECT_EQ(parse_error(m), "m.onnx: Relu node in the network's own forward (/Relu): its input 'conv_out' comes from no node, initializer or input");
  m = tiny_cnn();
  m.mutable_graph()->mutable_node()->SwapElements(1, 2);
  EXPECT_EQ(parse_error(m),
            "m.onnx: GlobalAveragePool node in module pool (/pool/GlobalAveragePool): its input 'relu' "
            "comes from a later node: the graph is not in topological order");
  m = tiny_cnn();
  m.mutable_graph()->mutable_node(1)->set_output(0, "conv");
  EXPECT_EQ(parse_error(m), "m.onnx: Relu node in the network's own forward (/Relu): its output 'conv' has another producer too");
  m = tiny_cnn();
  m.mutable_graph()->mutable_node(1)->set_domain("com.microsoft");
  EXPECT_EQ(parse_error(m), "m.onnx: Relu node in the network's own forward (/Relu) is of domain 'com.microsoft', not ONNX's default one");
  m = tiny_cnn();
  m.mutable_graph()->mutable_node(1)->add_attribute()->set_name("body");
  m.mutable_graph()->mutable_node(1)->mutable_attribute(0)->set_type(pb::AttributeProto::GRAPH);
  EXPECT_EQ(parse_error(m), "m.onnx: Relu node in the network's own forward (/Relu), attribute 'body' is of type GRAPH, which ddl does not read");
}

TEST(OnnxGraph, RefusesInitializersItCannotRead) {
  const auto with_weight = [](const std::function<void(pb::TensorProto&)>& change) {
    auto m = tiny_cnn();
    change(*m.mutable_graph()->mutable_initializer(0));
    return parse_error(m);
  };
  EXPECT_EQ(
      with_weight([](auto& t) { t.set_data_type(pb::TensorProto::FLOAT16); }),
      "m.onnx: initializer 'conv.weight' is of type FLOAT16, which ddl does not read (FLOAT, DOUBLE, INT64, INT32, "
      "BOOL)");
  EXPECT_EQ(with_weight([](auto& t) { t.set_data_type(99); }),
            "m.onnx: initializer 'conv.weight' is of type data type 99, which ddl does not read (FLOAT, DOUBLE, INT64, "
            "INT32, BOOL)");
  // DOUBLE is read as FLOAT (PyTorch writes `x.clamp(min=0.1)`'s bound as one); its data must be of doubles.
  EXPECT_EQ(
      with_weight([](auto& t) { t.set_data_type(pb::TensorProto::DOUBLE); }),
      "m.onnx: initializer 'conv.weight' [4, 3, 3, 3] holds data of another size than its 108 elements of DOUBLE: "
      "truncated or corrupt");
  auto doubles = tiny_cnn();
  pb::TensorProto& weight = *doubles.mutable_graph()->mutable_initializer(0);
  const std::string floats = weight.raw_data();
  std::vector<double> wide(floats.size() / sizeof(float));
  for (std::size_t i = 0; i < wide.size(); ++i) {
    float f;
    std::memcpy(&f, floats.data() + i * sizeof(float), sizeof f);
    wide[i] = f + 0.25;
  }
  weight.set_data_type(pb::TensorProto::DOUBLE);
  weight.set_raw_data(std::string(reinterpret_cast<const char*>(wide.data()), wide.size() * sizeof(double)));
  const Graph read = parse_onnx(bytes_of(doubles), "m.onnx");
  const std::vector<float>& got = read.constants.at(weight.name()).floats;
  ASSERT_EQ(got.size(), wide.size());
  for (std::size_t i = 0; i < wide.size(); ++i) EXPECT_EQ(got[i], static_cast<float>(wide[i]));
  EXPECT_EQ(with_weight([](auto& t) { t.mutable_raw_data()->resize(100); }),
            "m.onnx: initializer 'conv.weight' [4, 3, 3, 3] holds data of another size than its 108 elements of "
            "FLOAT: truncated or corrupt");
  EXPECT_EQ(with_weight([](auto& t) { t.set_dims(0, -4); }),
            "m.onnx: initializer 'conv.weight' has a negative dimension -4");
  EXPECT_EQ(with_weight([](auto& t) {
              for (int d = 0; d < 4; ++d) t.set_dims(d, 1 << 20);
            }),
            "m.onnx: initializer 'conv.weight' has more than 2^31 elements, over ddl's limit for one tensor");
  EXPECT_EQ(with_weight([](auto& t) { t.clear_raw_data(); }),
            "m.onnx: truncated: initializer 'conv.weight' has no data for its 108 elements");
  EXPECT_EQ(with_weight([](auto& t) { t.set_data_location(pb::TensorProto::EXTERNAL); }),
            "m.onnx: initializer 'conv.weight' keeps its data in another file, which ddl reads from the model's path "
            "only");
  // Integer tensors of every width ddl reads.
  auto m = tiny_cnn();
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("flags");
  t->set_data_type(pb::TensorProto::BOOL);
  t->add_dims(3);
  t->set_raw_data(std::string("\x01\x00\x07", 3));
  t = m.mutable_graph()->add_initializer();
  t->set_name("small");
  t->set_data_type(pb::TensorProto::INT32);
  t->add_int32_data(-5);
  const Graph g = parse_onnx(bytes_of(m), "m.onnx");
  EXPECT_EQ(g.constants.at("flags").ints, (std::vector<std::int64_t>{1, 0, 1}));
  EXPECT_TRUE(g.constants.at("small").integer);
  EXPECT_TRUE(g.constants.at("small").dims.empty());
  EXPECT_EQ(g.constants.at("small").ints, (std::vector<std::int64_t>{-5}));
}

// Each input either reads (and folds) or is an InputError: never another exception, a crash or a sanitizer
// report.
void expect_read_or_refused(const std::string& bytes) {
  try {
    Graph g = parse_onnx(bytes, "damaged.onnx");
    fold_constants(g);
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("damaged.onnx: ", 0), 0u) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(OnnxGraph, RefusesTruncatedAndDamagedBytes) {
  for (const auto& m : {tiny_cnn(), view_cnn()}) {
    const std::string whole = bytes_of(m);
    for (std::size_t cut = 0; cut < whole.size(); ++cut)
      EXPECT_THROW(parse_onnx(whole.substr(0, cut), "cut.onnx"), InputError) << "cut at " << cut;
    std::mt19937 random(7);
    for (int i = 0; i < 2000; ++i) {
      std::string damaged = whole;
      for (int k = 0; k < 1 + i % 4; ++k) damaged[random() % damaged.size()] = static_cast<char>(random());
      expect_read_or_refused(damaged);
    }
  }
  std::mt19937 random(11);
  for (int i = 0; i < 200; ++i) {
    std::string garbage(random() % 300, '\0');
    for (auto& c : garbage) c = static_cast<char>(random());
    expect_read_or_refused(garbage);
  }
}

TEST(OnnxGraph, FoldsViewOfTheBatchIntoAReshape) {
  for (const std::int64_t opset : {13, 17}) {
    Graph g = parse_onnx(bytes_of(view_cnn(opset)), "view.onnx");
    EXPECT_EQ(g.nodes.size(), 11u);
    fold_constants(g);
    EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Conv", "Relu", "Reshape", "Gemm"}));
    ASSERT_TRUE(g.constants.count("view_shape"));
    const Constant& shape = g.constants.at("view_shape");
    EXPECT_TRUE(shape.integer);
    EXPECT_EQ(shape.dims, (std::vector<std::int64_t>{2}));
    EXPECT_EQ(shape.ints, (std::vector<std::int64_t>{kBatch, -1}));
    // The intermediate values of the arithmetic are gone with their nodes.
    for (const char* gone : {"shape", "zero", "batch", "axes", "batch_1d", "minus_one"})
      EXPECT_FALSE(g.constants.count(gone)) << gone;
    EXPECT_EQ(g.constants.size(), 5u);
    EXPECT_EQ(g.initializers.size(), 4u);
  }
}

TEST(OnnxGraph, FoldsArithmeticOnTheInputsShape) {
  Graph g = parse_onnx(bytes_of(flatten_by_input_shape()), "flatten.onnx");
  fold_constants(g);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Reshape", "Gemm"}));
  EXPECT_EQ(g.constants.at("flat_shape").ints, (std::vector<std::int64_t>{kBatch, 48}));
  EXPECT_EQ(g.nodes[0].name, "Reshape_18");
}

// A graph "input -> Mul(input, value) -> [batch, 10]" after `build` added the nodes that compute `value`:
// folding leaves the Mul and gives the value as a constant.
Constant folded(const std::function<void(pb::GraphProto&)>& build) {
  pb::GraphProto g;
  *g.add_input() = value_info("input", {kFree, 1, 1, 10});
  *g.add_output() = value_info("logits", {kFree, 10});
  build(g);
  add_node(g, "Mul", {"input", "value"}, {"logits"});
  Graph graph = parse_onnx(bytes_of(model_of(std::move(g), 17)), "ops.onnx");
  fold_constants(graph);
  EXPECT_EQ(ops_of(graph), (std::vector<std::string>{"Mul"}));
  return graph.constants.at("value");
}

TEST(OnnxGraph, FoldsEachOperationOfShapeArithmetic) {
  Constant c = folded([](auto& g) {
    add_constant(g, "data", {2, 3}, {1, 2, 3, 4, 5, 6});
    add_constant(g, "starts", {2}, {-1, -1});
    add_constant(g, "ends", {2}, {-3, std::numeric_limits<std::int64_t>::min()});
    add_constant(g, "axes", {2}, {0, 1});
    add_constant(g, "steps", {2}, {-1, -2});
    add_node(g, "Slice", {"data", "starts", "ends", "axes", "steps"}, {"value"});
  });
  EXPECT_EQ(c.dims, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(c.ints, (std::vector<std::int64_t>{6, 4, 3, 1}));

  c = folded([](auto& g) {
    add_constant(g, "shape", {2}, {2, 3});
    add_node(g, "ConstantOfShape", {"shape"}, {"zeros"});
    add_node(g, "Shape", {"zeros"}, {"dims"});
    add_constant(g, "two", {}, {2});
    add_node(g, "Equal", {"dims", "two"}, {"is_two"});
    add_constant(g, "seven", {1}, {7});
    add_node(g, "Where", {"is_two", "seven", "dims"}, {"value"});
  });
  EXPECT_EQ(c.ints, (std::vector<std::int64_t>{7, 3}));

  c = folded([](auto& g) {
    add_constant(g, "start", {}, {10});
    add_constant(g, "limit", {}, {3});
    add_constant(g, "delta", {}, {-3});
    add_node(g, "Range", {"start", "limit", "delta"}, {"r"});
    add_constant(g, "shape", {2}, {2, 1});
    add_node(g, "Expand", {"r", "shape"}, {"wide"});
    add_constant(g, "divisor", {1}, {-4});
    add_node(g, "Div", {"wide", "divisor"}, {"q"});
    add_node(g, "Squeeze", {"q"}, {"all"});
    set_int(add_node(g, "Cast", {"all"}, {"value"}), "to", 1);
  });
  EXPECT_EQ(c.dims, (std::vector<std::int64_t>{2, 3}));
  EXPECT_FALSE(c.integer);
  EXPECT_EQ(c.floats, (std::vector<float>{-2, -1, -1, -2, -1, -1}));

  c = folded([](auto& g) {
    add_constant(g, "a", {2, 1}, {5, 6});
    add_constant(g, "b", {2, 1}, {7, 8});
    set_int(add_node(g, "Concat", {"a", "b"}, {"ab"}), "axis", 1);
    add_constant(g, "shape", {1}, {-1});
    add_node(g, "Reshape", {"ab", "shape"}, {"flat"});
    add_constant(g, "index", {2}, {-1, 0});
    add_node(g, "Gather", {"flat", "index"}, {"picked"});
    add_constant(g, "three", {}, {3});
    add_node(g, "Sub", {"picked", "three"}, {"picked_less_three"});
    add_node(g, "Identity", {"picked_less_three"}, {"value"});
  });
  EXPECT_EQ(c.ints, (std::vector<std::int64_t>{5, 2}));
}

TEST(OnnxGraph, FoldsModAndNotOfIntegers) {
  // Mod as Python's % (the sign of the divisor, as PyTorch exports it) and with fmod as C's (the dividend's).
  for (const std::int64_t fmod : {0, 1}) {
    Constant c = folded([&](auto& g) {
      add_constant(g, "a", {5}, {7, -7, 7, -7, 6});
      add_constant(g, "b", {5}, {3, 3, -3, -3, 3});
      set_int(add_node(g, "Mod", {"a", "b"}, {"value"}), "fmod", fmod);
    });
    EXPECT_EQ(c.ints, fmod ? (std::vector<std::int64_t>{1, -1, 1, -1, 0}) : (std::vector<std::int64_t>{1, 2, -2, -1, 0}));
  }
  Constant c = folded([](auto& g) {
    add_constant(g, "a", {3}, {4, 5, 8});
    add_constant(g, "four", {}, {4});
    add_node(g, "Mod", {"a", "four"}, {"rest"});
    add_constant(g, "zero", {}, {0});
    add_node(g, "Equal", {"rest", "zero"}, {"whole"});
    add_node(g, "Not", {"whole"}, {"value"});
  });
  EXPECT_EQ(c.ints, (std::vector<std::int64_t>{0, 1, 0}));
  // Comparisons of integers and of real numbers are booleans, which And, Or and Xor combine.
  Constant logic = folded([](auto& g) {
    add_constant(g, "a", {4}, {1, 2, 3, 4});
    add_constant(g, "two", {}, {2});
    add_node(g, "Less", {"a", "two"}, {"less"});
    add_node(g, "GreaterOrEqual", {"a", "two"}, {"at_least"});
    add_node(g, "Or", {"less", "at_least"}, {"either"});
    add_constant(g, "three", {}, {3});
    set_int(add_node(g, "Cast", {"a"}, {"reals"}), "to", 1);
    set_int(add_node(g, "Cast", {"three"}, {"real_three"}), "to", 1);
    add_node(g, "Greater", {"reals", "real_three"}, {"over"});
    add_node(g, "Xor", {"either", "over"}, {"value"});
  });
  EXPECT_EQ(logic.ints, (std::vector<std::int64_t>{1, 1, 1, 0}));
}

// swin_t's attention mask in small: slices of a tensor of zeros assigned (ScatterND), the difference of two
// views of it, and masked_fill's Equal, Not and Where; the real numbers computed by the registry's operators.
TEST(OnnxGraph, FoldsRealNumbersOnConstantsByTheRegistrysOperators) {
  const auto real = [](auto& g, const std::string& name, const Dims& dims, const Dims& values) {
    add_constant(g, name + "_int", dims, values);
    set_int(add_node(g, "Cast", {name + "_int"}, {name}), "to", 1);
  };
  Constant c = folded([&](auto& g) {
    add_constant(g, "four", {1}, {4});
    add_node(g, "ConstantOfShape", {"four"}, {"zeros"});
    add_constant(g, "at", {2, 1}, {1, 2});
    real(g, "fives", {2}, {5, 5});
    add_node(g, "ScatterND", {"zeros", "at", "fives"}, {"mask"});  // [0, 5, 5, 0]
    add_constant(g, "axis_0", {1}, {0});
    add_constant(g, "axis_1", {1}, {1});
    add_node(g, "Unsqueeze", {"mask", "axis_0"}, {"row"});
    add_node(g, "Unsqueeze", {"mask", "axis_1"}, {"column"});
    add_node(g, "Sub", {"row", "column"}, {"apart"});  // [4, 4]
    real(g, "zero", {}, {0});
    add_node(g, "Equal", {"apart", "zero"}, {"same"});
    add_node(g, "Not", {"same"}, {"other"});
    real(g, "hundred", {}, {-100});
    add_node(g, "Where", {"other", "hundred", "zero"}, {"filled"});
    real(g, "two", {}, {2});
    add_node(g, "Div", {"filled", "two"}, {"value"});
  });
  EXPECT_EQ(c.dims, (std::vector<std::int64_t>{4, 4}));
  EXPECT_FALSE(c.integer);
  EXPECT_EQ(c.floats, (std::vector<float>{0, -50, -50, 0, -50, 0, 0, -50, -50, 0, 0, -50, 0, -50, -50, 0}));
}

TEST(OnnxGraph, RefusesRealNumbersOnConstantsThatTheRegistryRefuses) {
  pb::GraphProto g;
  *g.add_input() = value_info("input", {kFree, 1, 1, 10});
  *g.add_output() = value_info("logits", {kFree, 10});
  add_constant(g, "a", {2}, {1, 2});
  set_int(add_node(g, "Cast", {"a"}, {"ra"}), "to", 1);
  add_constant(g, "b", {3}, {1, 2, 3});
  set_int(add_node(g, "Cast", {"b"}, {"rb"}), "to", 1);
  add_node(g, "Sub", {"ra", "rb"}, {"value"}, "/Sub");
  add_node(g, "Mul", {"input", "value"}, {"logits"});
  EXPECT_EQ(fold_error(model_of(g)), "m.onnx: Sub node in the network's own forward (/Sub): cannot broadcast [2] with [3]");
  g.mutable_node(4)->set_op_type("Sin");  // named before anything is folded
  g.mutable_node(4)->mutable_input()->RemoveLast();
  EXPECT_EQ(fold_error(model_of(g)),
            "m.onnx: Sin node in the network's own forward (/Sub, torch.sin): ddl does not support this operator "
            "(docs/onnx.md lists those it does)");
  g.mutable_node(4)->set_op_type("ScatterND");  // of integers: not shape arithmetic ddl folds
  g.mutable_node(4)->set_input(0, "a");
  g.mutable_node(4)->add_input("b");
  g.mutable_node(4)->add_input("a");
  EXPECT_EQ(fold_error(model_of(g)),
            "m.onnx: ScatterND node in the network's own forward (/Sub, an indexed assignment, x[...] = v): computes on "
            "constants only, and ddl folds only shape arithmetic");
}

TEST(OnnxGraph, RefusesAnInitializerPassedOnThroughAnIdentity) {
  // PyTorch's export in eval mode merges equal initializers and hands the one left to each user so.
  auto m = tiny_cnn();
  auto& g = *m.mutable_graph();
  add_node(g, "Identity", {"fc.bias"}, {"fc.bias.again"}, "Identity_0");
  g.mutable_node()->SwapElements(g.node_size() - 1, g.node_size() - 2);  // before the Gemm that reads it
  g.mutable_node(g.node_size() - 1)->set_input(2, "fc.bias.again");
  EXPECT_EQ(fold_error(m),
            "m.onnx: Identity node 'Identity_0': passes on initializer 'fc.bias' under another name, as PyTorch's "
            "export does with initializers of equal values in eval mode (export with model.train(), "
            "training=torch.onnx.TrainingMode.TRAINING and do_constant_folding=False, as launch/export_onnx.py does) "
            "and with parameters that modules share, which ddl does not take this way");
}

pb::ModelProto view_cnn_with(const std::function<void(pb::GraphProto&)>& change) {
  auto m = view_cnn();
  change(*m.mutable_graph());
  return m;
}

TEST(OnnxGraph, FoldsTheShapeOfValuesComputedOnImages) {
  // Index 1 of the shape of the ReLU after the convolution: its 2 channels.
  const std::string one(std::string("\x01\0\0\0\0\0\0\0", 8));
  Graph g = parse_onnx(bytes_of(view_cnn_with(
                           [&](auto& g) { g.mutable_node(3)->mutable_attribute(0)->mutable_t()->set_raw_data(one); })),
                       "m.onnx");
  fold_constants(g);
  EXPECT_EQ(g.constants.at("view_shape").ints, (std::vector<std::int64_t>{2, -1}));

  // Twice the batch: [tokens * batch, features] as attention's reshapes compute it.
  pb::GraphProto twice;
  *twice.add_input() = value_info("input", {kFree, 1, 1, 10});
  *twice.add_output() = value_info("logits", {kFree, 10});
  add_node(twice, "Shape", {"input"}, {"shape"});
  add_constant(twice, "two", {1}, {2});
  add_node(twice, "Mul", {"shape", "two"}, {"value"}, "/Mul");
  add_node(twice, "Reshape", {"input", "value"}, {"logits"});
  Graph folded = parse_onnx(bytes_of(model_of(twice)), "m.onnx");
  fold_constants(folded);
  EXPECT_EQ(folded.constants.at("value").ints, (std::vector<std::int64_t>{2 * kBatch, 2, 2, 20}));
}

TEST(OnnxGraph, RefusesArithmeticItCannotFold) {
  // Index 1 of the shape of a value whose dims ddl does not know before the layers are built (an operator
  // whose rule refuses its attributes: the builder names that problem later).
  const std::string one(std::string("\x01\0\0\0\0\0\0\0", 8));
  const auto softmax_of_axis_9 = [](pb::GraphProto& g) {
    g.mutable_node(1)->set_op_type("Softmax");
    set_int(*g.mutable_node(1), "axis", 9);
  };
  EXPECT_EQ(fold_error(view_cnn_with([&](auto& g) {
              softmax_of_axis_9(g);
              g.mutable_node(3)->mutable_attribute(0)->mutable_t()->set_raw_data(one);
            })),
            "m.onnx: Gather node in the network's own forward (/Gather): needs the shape of 'relu', which ddl cannot "
            "know before the layers are "
            "built");
  EXPECT_EQ(fold_error(view_cnn_with([&](auto& g) {
              softmax_of_axis_9(g);
              g.mutable_node(6)->set_input(0, "shape");
            })),
            "m.onnx: Unsqueeze node in the network's own forward (/Unsqueeze): needs the shape of 'relu', which ddl "
            "cannot know before the layers "
            "are built");
  EXPECT_EQ(fold_error(view_cnn_with([](auto& g) { g.mutable_node(3)->set_op_type("Sin"); })),
            "m.onnx: Sin node in the network's own forward (/zero, torch.sin): ddl does not support this operator "
            "(docs/onnx.md lists those it does)");
  EXPECT_EQ(fold_error(view_cnn_with([](auto& g) { set_int(*g.mutable_node(8), "axis", 2); })),
            "m.onnx: Concat node in the network's own forward (/Concat): axis 2 is outside a tensor of rank 1");
  EXPECT_EQ(fold_error(view_cnn_with(
                [](auto& g) { g.mutable_node(8)->mutable_attribute(0)->set_type(pb::AttributeProto::FLOAT); })),
            "m.onnx: Concat node in the network's own forward (/Concat): attribute 'axis' is not an integer");
  EXPECT_EQ(fold_error(view_cnn_with([](auto& g) { g.mutable_output(0)->set_name("view_shape"); })),
            "m.onnx: output 'view_shape' does not depend on the input image");
}

TEST(OnnxGraph, RefusesAUseOfTheBatchOtherThanTheBatch) {
  pb::GraphProto g;
  *g.add_input() = value_info("input", {kFree, 1, 1, 10});
  *g.add_output() = value_info("logits", {kFree, 10});
  add_node(g, "Shape", {"input"}, {"shape"});
  add_constant(g, "two", {1}, {2});
  add_node(g, "Add", {"shape", "two"}, {"value"}, "/Add");
  add_node(g, "Reshape", {"input", "value"}, {"logits"});
  EXPECT_EQ(fold_error(model_of(g)),
            "m.onnx: Add node in the network's own forward (/Add): its result changes with the batch size, but is not a multiple of it");
  g.mutable_node(2)->set_op_type("ConstantOfShape");
  g.mutable_node(2)->mutable_input()->RemoveLast();
  EXPECT_EQ(fold_error(model_of(g)),
            "m.onnx: ConstantOfShape node in the network's own forward (/Add): the shape of its result changes with the batch size");
}

TEST(OnnxGraph, RefusesResultsLargerThanShapes) {
  pb::GraphProto g;
  *g.add_input() = value_info("input", {kFree, 1, 1, 10});
  *g.add_output() = value_info("logits", {kFree, 10});
  add_constant(g, "shape", {1}, {1 << 30});
  add_node(g, "ConstantOfShape", {"shape"}, {"value"});
  add_node(g, "Mul", {"input", "value"}, {"logits"});
  EXPECT_EQ(fold_error(model_of(g)),
            "m.onnx: ConstantOfShape node 'ConstantOfShape_1': gives a tensor of dims "
            "[1073741824], more than 2^20 elements: ddl folds shape arithmetic");
}

TEST(OnnxGraph, StripsWeightsAndReadsThemBackAsZeros) {
  const std::string whole = bytes_of(tiny_cnn());
  const std::set<std::string> kept = {"conv.weight", "fc.bias"};
  const std::string stripped = strip_weights(whole, kept);
  EXPECT_LT(stripped.size(), whole.size() - 108 * 4);
  EXPECT_EQ(error_of([&] { parse_onnx(stripped, "s.onnx"); }),
            "s.onnx: truncated: initializer 'conv.weight' has no data for its 108 elements");
  const Graph g = parse_onnx(stripped, "s.onnx", kept);
  const Graph original = parse_onnx(whole, "w.onnx");
  for (const auto& [name, c] : original.constants) {
    const Constant& read = g.constants.at(name);
    EXPECT_EQ(read.dims, c.dims) << name;
    if (kept.count(name))
      EXPECT_EQ(read.floats, std::vector<float>(c.size(), 0.f)) << name;
    else
      EXPECT_EQ(read.floats, c.floats) << name;
  }
  EXPECT_EQ(ops_of(g), ops_of(original));
  EXPECT_EQ(error_of([&] { strip_weights(whole, {"conv.weights"}); }),
            "ONNX model: has no initializer 'conv.weights' whose data to remove");
  EXPECT_THROW(strip_weights("garbage", kept), InputError);
}

TEST(OnnxGraph, ReadsAFileAndNamesAMissingOne) {
  const std::string path = ::testing::TempDir() + "/ddl_onnx_graph_test.onnx";
  std::ofstream(path, std::ios::binary) << bytes_of(tiny_cnn());
  EXPECT_EQ(read_onnx(path).source, path);
  std::remove(path.c_str());
  EXPECT_EQ(error_of([&] { read_onnx(path); }), path + ": cannot open: No such file or directory");
  EXPECT_EQ(error_of([&] { read_onnx(::testing::TempDir()); }), ::testing::TempDir() + ": a folder, not an ONNX file");
}

// nn.GroupNorm as PyTorch exports it on input [batch, 4, 2, 2]: to `groups` ([0, groups, -1]),
// InstanceNormalization of ones and zeros, back to [batch, back...] (the input's Shape where empty), times the
// weight and plus the bias, unsqueezed; then pooled to [batch, 4]. The nodes left of the GroupNorm's.
std::vector<std::string> ops_after_fusion(const Dims& groups, const Dims& back) {
  pb::GraphProto g;
  *g.add_input() = value_info("input", {kFree, 4, 2, 2});
  *g.add_output() = value_info("logits", {kFree, 4});
  add_constant(g, "to_groups", {3}, groups);
  add_node(g, "Reshape", {"input", "to_groups"}, {"grouped"}, "/gn/Reshape");
  *g.add_initializer() = float_tensor("ones", {2});
  *g.add_initializer() = float_tensor("zeros", {2});
  for (const auto& [name, value] : {std::pair<std::string, float>{"ones", 1.0f}, {"zeros", 0.0f}}) {
    auto* t = &g.mutable_initializer()->at(g.initializer_size() - (name == "ones" ? 2 : 1));
    t->clear_raw_data();
    t->clear_float_data();
    for (int i = 0; i < 2; ++i) t->add_float_data(value);
  }
  add_node(g, "InstanceNormalization", {"grouped", "ones", "zeros"}, {"normal"}, "/gn/InstanceNormalization");
  add_node(g, "Shape", {"input"}, {"shape"}, "/gn/Shape");
  if (!back.empty()) {  // [the batch, back...]
    add_constant(g, "zero", {}, {0});
    set_int(add_node(g, "Gather", {"shape", "zero"}, {"batch"}, "/gn/Gather"), "axis", 0);
    add_constant(g, "first", {1}, {0});
    add_node(g, "Unsqueeze", {"batch", "first"}, {"batch_1"}, "/gn/Unsqueeze_2");
    add_constant(g, "rest", {static_cast<std::int64_t>(back.size())}, back);
    set_int(add_node(g, "Concat", {"batch_1", "rest"}, {"back_to"}, "/gn/Concat"), "axis", 0);
  }
  add_node(g, "Reshape", {"normal", back.empty() ? "shape" : "back_to"}, {"back"}, "/gn/Reshape_1");
  *g.add_initializer() = float_tensor("gn.weight", {4});
  *g.add_initializer() = float_tensor("gn.bias", {4});
  add_constant(g, "axes", {2}, {1, 2});
  add_node(g, "Unsqueeze", {"gn.weight", "axes"}, {"weight"}, "/gn/Unsqueeze");
  add_node(g, "Unsqueeze", {"gn.bias", "axes"}, {"bias"}, "/gn/Unsqueeze_1");
  add_node(g, "Mul", {"back", "weight"}, {"scaled"}, "/gn/Mul");
  add_node(g, "Add", {"scaled", "bias"}, {"normalised"}, "/gn/Add");
  add_node(g, "GlobalAveragePool", {"normalised"}, {"pool"}, "/pool");
  set_int(add_node(g, "Flatten", {"pool"}, {"logits"}, "/Flatten"), "axis", 1);
  Graph graph = parse_onnx(bytes_of(model_of(std::move(g))), "gn.onnx");
  fold_constants(graph);
  fuse_norms_and_activations(graph);
  std::vector<std::string> ops;
  for (const Node& n : graph.nodes)
    if (n.op != "Unsqueeze" && n.op != "GlobalAveragePool" && n.op != "Flatten") ops.push_back(n.op);
  return ops;
}

TEST(OnnxGraph, GroupNormIsFusedWhereItsPatternMatchesOnly) {
  EXPECT_EQ(ops_after_fusion({0, 2, -1}, {}), (std::vector<std::string>{"GroupNormalization"}));
  const std::vector<std::string> unfused = {"Reshape", "InstanceNormalization", "Reshape", "Mul", "Add"};
  // ONNX's 0 keeps a dimension: [0, 0, -1] is no grouping ddl can read (it was a division by zero).
  EXPECT_EQ(ops_after_fusion({0, 0, -1}, {}), unfused);
  // Back to the input's dims given as numbers after the batch, and to other dims of the same rank.
  EXPECT_EQ(ops_after_fusion({0, 2, -1}, {4, 2, 2}), (std::vector<std::string>{"GroupNormalization"}));
  EXPECT_EQ(ops_after_fusion({0, 2, -1}, {4, 4, 1}), unfused);
}

}  // namespace
}  // namespace ddl::onnx
