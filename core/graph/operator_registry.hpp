// The operators ddl runs in a graph, by ONNX type: one record each, made once (operator.hpp). An operator that
// is not here is known before anything is built, from the graph's node types alone.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "core/graph/operator.hpp"

namespace ddl {

struct OperatorRecord {
  std::string_view type;    // ONNX's op_type
  std::string_view family;  // "element-wise", "normalisation", ...: docs/onnx.md's sections
  std::unique_ptr<Operator> (*make)(OpSpec spec);
  std::string_view limits;  // what ddl takes of it, where less than ONNX allows ("" for all of it)
};

// The records of each family (each defined in its family's file) and of all of them, by type.
std::span<const OperatorRecord> elementwise_operators();
std::span<const OperatorRecord> normalization_operators();
std::span<const OperatorRecord> shape_operators();
std::span<const OperatorRecord> reduction_operators();
std::span<const OperatorRecord> matrix_operators();
std::span<const OperatorRecord> convolution_operators();
std::span<const OperatorRecord> resampling_operators();

// The record of an ONNX type, nullptr where ddl has none.
const OperatorRecord* find_operator(std::string_view type);
// The operator for spec; throws InputError naming the node where ddl has no such operator.
std::unique_ptr<Operator> make_operator(OpSpec spec);

// A record's `make`: the operator class built from the spec.
template <class Op>
std::unique_ptr<Operator> make(OpSpec spec) {
  return std::make_unique<Op>(std::move(spec));
}

}  // namespace ddl
