#include "models/onnx/value_shapes.hpp"

#include <string>

#include "core/graph/operator_registry.hpp"
#include "models/onnx/op_spec.hpp"

namespace ddl::onnx {

std::optional<Dims> output_dims(const Node& node, const std::vector<std::optional<Dims>>& dims,
                                const std::vector<const Constant*>& values) {
  if (dims.empty() || !dims[0]) return std::nullopt;
  // The batch size that stands for kBatchTimes in a shape the graph gives: the first axis of the first input
  // computed on images (a Sub's first input may be the constant 1 of `1 - x`, of no axis).
  std::int64_t batch = 1;
  for (std::size_t i = dims.size(); i-- > 0;)
    if (dims[i] && !dims[i]->empty() && (i >= values.size() || !values[i])) batch = dims[i]->at(0);
  // The operators' own rules (core/graph/), the ones that run the graph.
  if (const OperatorRecord* record = find_operator(node.op)) {
    std::vector<OpValue> held(dims.size());
    std::vector<const OpValue*> in(dims.size(), nullptr);
    for (std::size_t i = 0; i < dims.size(); ++i) {
      const Constant* c = i < values.size() ? values[i] : nullptr;
      if ((c && c->integer) || !dims[i]) continue;  // given to the operator as numbers, or left out
      held[i] = {*dims[i], c ? const_cast<float*>(c->floats.data()) : nullptr, nullptr, c != nullptr};
      in[i] = &held[i];
    }
    try {
      return record->make(op_spec("", node, values))->output_dims(in, batch);
    } catch (const InputError&) {
      return std::nullopt;  // the builder names the problem
    }
  }
  // ChannelShuffle: ddl's own layer (fuse_patterns.hpp), not an ONNX operator.
  if (node.op == "ChannelShuffle") return dims[0];
  return std::nullopt;
}

}  // namespace ddl::onnx
