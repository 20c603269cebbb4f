// Small ONNX models built with protobuf's API, as torch.onnx.export writes them: for the tests of
// models/onnx/ and the seeds of the onnx_graph fuzz target (tests/fuzz/make_seeds.cpp).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace ddl::onnx_test {

namespace pb = ::onnx;
using Dims = std::vector<std::int64_t>;

// In a value's dims: a named dimension, as dynamic_axes makes the batch.
inline constexpr std::int64_t kFree = -1;

inline pb::ValueInfoProto value_info(const std::string& name, const Dims& dims) {
  pb::ValueInfoProto v;
  v.set_name(name);
  auto* tensor = v.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(pb::TensorProto::FLOAT);
  auto* shape = tensor->mutable_shape();
  for (const std::int64_t d : dims)
    if (d == kFree)
      shape->add_dim()->set_dim_param("batch");
    else
      shape->add_dim()->set_dim_value(d);
  return v;
}

inline pb::NodeProto& add_node(pb::GraphProto& g, const std::string& op, const std::vector<std::string>& inputs,
                               const std::vector<std::string>& outputs, const std::string& name = "") {
  pb::NodeProto& n = *g.add_node();
  n.set_op_type(op);
  n.set_name(name);
  for (const auto& in : inputs) n.add_input(in);
  for (const auto& out : outputs) n.add_output(out);
  return n;
}

inline void set_int(pb::NodeProto& n, const std::string& name, std::int64_t value) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INT);
  a->set_i(value);
}

inline void set_ints(pb::NodeProto& n, const std::string& name, const Dims& values) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INTS);
  for (const std::int64_t v : values) a->add_ints(v);
}

// Values 0.01 * (i % 17): in raw_data as torch writes them, or in float_data.
inline pb::TensorProto float_tensor(const std::string& name, const Dims& dims, bool raw = true) {
  pb::TensorProto t;
  t.set_name(name);
  t.set_data_type(pb::TensorProto::FLOAT);
  std::size_t n = 1;
  for (const std::int64_t d : dims) {
    t.add_dims(d);
    n *= static_cast<std::size_t>(d);
  }
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = 0.01f * static_cast<float>(i % 17);
  if (raw)
    t.set_raw_data(values.data(), values.size() * sizeof(float));
  else
    for (const float v : values) t.add_float_data(v);
  return t;
}

inline pb::TensorProto int_tensor(const Dims& dims, const Dims& values) {
  pb::TensorProto t;
  t.set_data_type(pb::TensorProto::INT64);
  for (const std::int64_t d : dims) t.add_dims(d);
  t.set_raw_data(values.data(), values.size() * sizeof(std::int64_t));
  return t;
}

// A Constant node giving `output` (integers of `dims`: {} for a scalar).
inline void add_constant(pb::GraphProto& g, const std::string& output, const Dims& dims, const Dims& values) {
  auto* a = add_node(g, "Constant", {}, {output}, "/" + output).add_attribute();
  a->set_name("value");
  a->set_type(pb::AttributeProto::TENSOR);
  *a->mutable_t() = int_tensor(dims, values);
}

inline pb::ModelProto model_of(pb::GraphProto graph, std::int64_t opset = 13) {
  pb::ModelProto m;
  m.set_ir_version(7);
  m.set_producer_name("pytorch");
  m.set_producer_version("1.13.0");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  *m.mutable_graph() = std::move(graph);
  return m;
}

inline void conv(pb::GraphProto& g, const std::string& in, const std::string& out, int channels, int filters) {
  *g.add_initializer() = float_tensor("conv.weight", {filters, channels, 3, 3});
  *g.add_initializer() = float_tensor("conv.bias", {filters}, false);
  auto& c = add_node(g, "Conv", {in, "conv.weight", "conv.bias"}, {out}, "/conv/Conv");
  set_ints(c, "kernel_shape", {3, 3});
  set_ints(c, "pads", {1, 1, 1, 1});
}

inline void gemm(pb::GraphProto& g, const std::string& in, int features, int classes) {
  *g.add_initializer() = float_tensor("fc.weight", {classes, features});
  *g.add_initializer() = float_tensor("fc.bias", {classes});
  set_int(add_node(g, "Gemm", {in, "fc.weight", "fc.bias"}, {"logits"}, "/fc/Gemm"), "transB", 1);
}

// input [batch, 3, 8, 8] -> Conv 3x3 (4 filters) -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> [batch, 10]
inline pb::ModelProto tiny_cnn() {
  pb::GraphProto g;
  g.set_name("tiny_cnn");
  *g.add_input() = value_info("input", {kFree, 3, 8, 8});
  *g.add_output() = value_info("logits", {kFree, 10});
  conv(g, "input", "conv", 3, 4);
  add_node(g, "Relu", {"conv"}, {"relu"}, "/Relu");
  add_node(g, "GlobalAveragePool", {"relu"}, {"pool"}, "/pool/GlobalAveragePool");
  set_int(add_node(g, "Flatten", {"pool"}, {"flat"}, "/Flatten"), "axis", 1);
  gemm(g, "flat", 4, 10);
  return model_of(std::move(g));
}

// torch's x.view(x.size(0), -1) after a convolution: input [batch, 3, 4, 4] -> Conv (2 filters) -> Relu ->
// Reshape to [Gather(Shape(relu), 0), -1] -> Gemm -> [batch, 10].
inline pb::ModelProto view_cnn(std::int64_t opset = 13) {
  pb::GraphProto g;
  g.set_name("view_cnn");
  *g.add_input() = value_info("input", {kFree, 3, 4, 4});
  *g.add_output() = value_info("logits", {kFree, 10});
  conv(g, "input", "conv", 3, 2);
  add_node(g, "Relu", {"conv"}, {"relu"}, "/Relu");
  add_node(g, "Shape", {"relu"}, {"shape"}, "/Shape");
  add_constant(g, "zero", {}, {0});
  set_int(add_node(g, "Gather", {"shape", "zero"}, {"batch"}, "/Gather"), "axis", 0);
  add_constant(g, "axes", {1}, {0});
  add_node(g, "Unsqueeze", {"batch", "axes"}, {"batch_1d"}, "/Unsqueeze");
  add_constant(g, "minus_one", {1}, {-1});
  set_int(add_node(g, "Concat", {"batch_1d", "minus_one"}, {"view_shape"}, "/Concat"), "axis", 0);
  add_node(g, "Reshape", {"relu", "view_shape"}, {"flat"}, "/Reshape");
  gemm(g, "flat", 2 * 4 * 4, 10);
  return model_of(std::move(g), opset);
}

// torch.flatten spelled out on the input's shape: input [batch, 3, 4, 4] -> Reshape to [batch, C * H * W],
// computed from Shape(input) by Gather, Slice, Mul, Unsqueeze and Concat -> Gemm -> [batch, 10].
inline pb::ModelProto flatten_by_input_shape() {
  pb::GraphProto g;
  *g.add_input() = value_info("input", {kFree, 3, 4, 4});
  *g.add_output() = value_info("logits", {kFree, 10});
  add_node(g, "Shape", {"input"}, {"shape"});
  add_constant(g, "zero", {}, {0});
  add_node(g, "Gather", {"shape", "zero"}, {"n"});
  add_constant(g, "one", {1}, {1});
  add_constant(g, "end", {1}, {std::numeric_limits<std::int64_t>::max()});
  add_node(g, "Slice", {"shape", "one", "end"}, {"chw"});
  for (const int i : {0, 1, 2}) {
    add_constant(g, "i" + std::to_string(i), {}, {i});
    add_node(g, "Gather", {"chw", "i" + std::to_string(i)}, {"d" + std::to_string(i)});
  }
  add_node(g, "Mul", {"d0", "d1"}, {"ch"});
  add_node(g, "Mul", {"ch", "d2"}, {"features"});
  add_constant(g, "axes", {1}, {0});
  add_node(g, "Unsqueeze", {"n", "axes"}, {"n_1d"});
  add_node(g, "Unsqueeze", {"features", "axes"}, {"features_1d"});
  set_int(add_node(g, "Concat", {"n_1d", "features_1d"}, {"flat_shape"}), "axis", 0);
  add_node(g, "Reshape", {"input", "flat_shape"}, {"flat"});
  gemm(g, "flat", 3 * 4 * 4, 10);
  return model_of(std::move(g), 17);
}

inline std::string bytes_of(const pb::ModelProto& m) { return m.SerializeAsString(); }

}  // namespace ddl::onnx_test
