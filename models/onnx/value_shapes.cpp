#include "models/onnx/value_shapes.hpp"

#include <algorithm>
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

std::optional<std::size_t> axis_of(const Node& split, const Dims& input) {
  const auto rank = static_cast<std::int64_t>(input.size());
  const std::int64_t axis = split.integer("axis", 0) + (split.integer("axis", 0) < 0 ? rank : 0);
  if (axis < 0 || axis >= rank) return std::nullopt;
  return static_cast<std::size_t>(axis);
}

bool splits_equally(const Node& split) {
  return (split.inputs.size() < 2 || split.inputs[1].empty()) && split.integers("split", {}).empty();
}

std::optional<Dims> split_sizes(const Node& split, const Dims* input, const Constant* sizes) {
  const std::size_t parts = split.outputs.size();
  if (!splits_equally(split)) {
    Dims given = split.integers("split", {});
    if (given.empty() && sizes && sizes->integer) given = sizes->ints;
    std::int64_t sum = 0;
    for (const std::int64_t size : given) {
      if (size < 0) return std::nullopt;
      sum += size;
    }
    if (given.size() != parts || (input && !axis_of(split, *input)) ||
        (input && sum != (*input)[*axis_of(split, *input)]))
      return std::nullopt;
    return given;
  }
  const auto axis = input ? axis_of(split, *input) : std::nullopt;
  if (!axis || parts == 0) return std::nullopt;
  const std::int64_t length = (*input)[*axis], part = (length + static_cast<std::int64_t>(parts) - 1) / parts;
  Dims equal;
  for (std::size_t k = 0; k < parts; ++k) equal.push_back(std::clamp<std::int64_t>(length - k * part, 0, part));
  return equal;
}

}  // namespace ddl::onnx
