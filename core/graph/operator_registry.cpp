#include "core/graph/operator_registry.hpp"

#include <map>

namespace ddl {
namespace {

// Built once, read only after.
const std::map<std::string_view, const OperatorRecord*>& by_type() {
  static const std::map<std::string_view, const OperatorRecord*> table = [] {
    std::map<std::string_view, const OperatorRecord*> all;
    for (const auto family : {elementwise_operators(), normalization_operators(), shape_operators(),
                              reduction_operators(), matrix_operators(), convolution_operators(),
                              resampling_operators()})
      for (const OperatorRecord& record : family) all.emplace(record.type, &record);
    return all;
  }();
  return table;
}

}  // namespace

const OperatorRecord* find_operator(std::string_view type) {
  const auto it = by_type().find(type);
  return it == by_type().end() ? nullptr : it->second;
}

std::unique_ptr<Operator> make_operator(OpSpec spec) {
  const OperatorRecord* record = find_operator(spec.type);
  if (!record) spec.fail("ddl does not support this operator (docs/onnx.md lists those it does)");
  return record->make(std::move(spec));
}

}  // namespace ddl
