#include "models/onnx/op_spec.hpp"

#include "models/onnx/message_text.hpp"

namespace ddl::onnx {

OpSpec op_spec(const std::string& source, const Node& node, const std::vector<const Constant*>& constants) {
  OpSpec spec;
  spec.type = node.op;
  spec.name = one_line(source + ": " + node.describe());
  for (const auto& [name, a] : node.attributes) {
    OpAttribute& o = spec.attributes[name];
    if (a.kind == Attribute::Kind::integer) o.ints = {a.i};
    if (a.kind == Attribute::Kind::real) o.floats = {a.f};
    if (a.kind == Attribute::Kind::text) o.text = a.s;
    if (a.kind == Attribute::Kind::integers) o.ints = a.ints;
    if (a.kind == Attribute::Kind::reals) o.floats = a.floats;
  }
  for (std::size_t i = 0; i < constants.size(); ++i)
    if (const Constant* c = constants[i]; c && c->integer) spec.integers[i] = {dims_t(c->dims.begin(), c->dims.end()), c->ints};
  return spec;
}

OpSpec op_spec(const Graph& graph, const Node& node) {
  std::vector<const Constant*> constants;
  for (const std::string& input : node.inputs) {
    const auto c = graph.constants.find(input);
    constants.push_back(c == graph.constants.end() ? nullptr : &c->second);
  }
  return op_spec(graph.source, node, constants);
}

}  // namespace ddl::onnx
