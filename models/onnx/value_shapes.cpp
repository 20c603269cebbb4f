#include "models/onnx/value_shapes.hpp"

#include <string>

#include "core/graph/operator_registry.hpp"
#include "models/onnx/op_spec.hpp"

namespace ddl::onnx {

std::optional<Dims> output_dims(const Node& node, const std::vector<std::optional<Dims>>& dims,
                                const std::vector<const Constant*>& values, std::int64_t batch) {
  if (dims.empty() || !dims[0]) return std::nullopt;
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

std::optional<std::size_t> axis_of(const Node& split, const Dims& input) {
  const auto rank = static_cast<std::int64_t>(input.size());
  const std::int64_t axis = split.integer("axis", 0) + (split.integer("axis", 0) < 0 ? rank : 0);
  if (axis < 0 || axis >= rank) return std::nullopt;
  return static_cast<std::size_t>(axis);
}

bool splits_equally(const Node& split) { return split.inputs.size() < 2 || split.inputs[1].empty(); }

std::optional<Dims> split_sizes(const Node& split, const Dims* input, const Constant* sizes) {
  const auto parts = static_cast<std::int64_t>(split.outputs.size());
  const auto axis = input ? axis_of(split, *input) : std::nullopt;
  if (!splits_equally(split)) {
    if (!sizes || !sizes->integer || sizes->ints.size() != split.outputs.size()) return std::nullopt;
    std::int64_t sum = 0;
    for (const std::int64_t size : sizes->ints) {
      if (size < 0) return std::nullopt;
      sum += size;
    }
    if (input && (!axis || sum != (*input)[*axis])) return std::nullopt;
    return sizes->ints;
  }
  // Opsets 13 to 17 split into equal parts only where they divide the axis.
  if (!axis || parts == 0 || (*input)[*axis] % parts != 0) return std::nullopt;
  return Dims(split.outputs.size(), (*input)[*axis] / parts);
}

}  // namespace ddl::onnx
