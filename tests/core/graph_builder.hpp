// A graph layer written out in a test: parameters and constants first, then operators by ONNX type, each
// add() returning the number of the value it computes. `ends` makes it one part of a graph cut in several.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/graph_layer.hpp"

namespace ddl::test {

class GraphBuilder {
 public:
  GraphBuilder(std::vector<ParamSpec> params, std::vector<GraphConstant> constants, GraphEnds ends = {})
      : params_(std::move(params)), constants_(std::move(constants)), ends_(std::move(ends)) {}
  int add(const std::string& type, std::vector<int> inputs, std::map<std::string, OpAttribute> attributes = {},
          std::map<std::size_t, IntegerInput> integers = {}) {
    OpSpec spec;
    spec.type = type;
    spec.name = type + " node";
    spec.inputs = std::move(inputs);
    spec.attributes = std::move(attributes);
    spec.integers = std::move(integers);
    ops_.push_back(std::move(spec));
    const std::size_t taken = std::max<std::size_t>(1, ends_.takes.size());
    return static_cast<int>(taken + params_.size() + constants_.size() + ops_.size() - 1);
  }
  GraphLayer build() { return GraphLayer(params_, constants_, ops_, {}, 0, ends_); }
  std::unique_ptr<GraphLayer> make() {
    return std::make_unique<GraphLayer>(params_, constants_, ops_, BatchAxis{}, 0, ends_);
  }

 private:
  std::vector<ParamSpec> params_;
  std::vector<GraphConstant> constants_;
  std::vector<OpSpec> ops_;
  GraphEnds ends_;
};

inline ParamSpec param(const std::string& name, dims_t dims) { return {name, std::move(dims), Init::zeros}; }
inline OpAttribute ints(std::vector<std::int64_t> v) { return {std::move(v), {}, ""}; }
inline OpAttribute real(float v) { return {{}, {v}, ""}; }
inline OpAttribute text(std::string v) { return {{}, {}, std::move(v)}; }
// An integer input: a list (dims [n]) or, with `scalar`, one number of rank 0.
inline IntegerInput integers(std::vector<std::int64_t> v, bool scalar = false) {
  return {scalar ? dims_t{} : dims_t{static_cast<std::int64_t>(v.size())}, std::move(v)};
}

}  // namespace ddl::test
