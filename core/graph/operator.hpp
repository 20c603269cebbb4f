// One operator of a graph (an ONNX node) as ddl runs it: its output's dims from its inputs', its forward,
// and its backward by reverse-mode differentiation. Each operator type is defined once, in its family's
// file (elementwise.cpp, normalization.cpp, shape_ops.cpp, reductions.cpp, matrix.cpp, convolution.cpp,
// resampling.cpp), and found by its ONNX type in the registry (operator_registry.hpp). Shape inference before
// a graph is built and the graph layer that runs it (graph_layer.hpp) both ask the same operator.
//
// Values are plain row-major f32 tensors. Integer inputs (Reshape's shape, Slice's bounds, an axes list) are
// known before the graph runs and are given to the operator as numbers (OpSpec::integers), not as values.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/graph/shape_rules.hpp"

namespace ddl {

// In a shape the graph gives (a Reshape's, an Expand's), kBatchTimes * k (k >= 1) stands for k times the batch
// size, which the graph learns when it is set up for its input.
inline constexpr std::int64_t kBatchTimes = -2147483647;
// Whether a number in such a shape stands for k times the batch: -INT64_MAX, a Slice's "to the start" bound
// (torch.flip's), does not.
inline bool follows_batch(std::int64_t v) {
  return v <= kBatchTimes && v % kBatchTimes == 0 && v / kBatchTimes <= (std::int64_t{1} << 24);
}

struct OpAttribute {
  std::vector<std::int64_t> ints;  // one for an integer
  std::vector<float> floats;       // one for a real number
  std::string text;
};

// An integer input known before the graph runs: a shape, an axes list, bounds, a constant mask.
struct IntegerInput {
  dims_t dims;
  std::vector<std::int64_t> values;
};

// What an operator is made from: a node's type, attributes and inputs.
struct OpSpec {
  std::string type;  // ONNX's op_type: "Conv", "Softmax"
  std::string name;  // how messages name it ("model.onnx: Softmax node '/attn/Softmax'")
  std::vector<int> inputs;  // the values it reads, by number; -1 where an input is left out or given as integers
  std::map<std::size_t, IntegerInput> integers;  // integer inputs known before it runs, by position
  std::map<std::string, OpAttribute> attributes;

  std::int64_t integer(const std::string& attribute, std::int64_t otherwise) const;
  float real(const std::string& attribute, float otherwise) const;
  std::vector<std::int64_t> ints(const std::string& attribute, std::vector<std::int64_t> otherwise) const;
  std::string text(const std::string& attribute, const std::string& otherwise) const;
  // Integer input i, where given (a Reshape's shape); nullptr where not.
  const std::vector<std::int64_t>* integer_input(std::size_t i) const;
  bool has_input(std::size_t i) const { return i < inputs.size() && inputs[i] >= 0; }
  // Throws InputError "<name>: <problem>".
  [[noreturn]] void fail(const std::string& problem) const;
};

// A value an operator reads or writes. `data` is null while shapes are inferred for a value computed on
// images; a constant's (a Clip's bound, a Resize's scales) is known then too. `grad` is null where no
// gradient flows to it.
struct OpValue {
  dims_t dims;
  float* data = nullptr;
  float* grad = nullptr;
  bool constant = false;
};

using OpInputs = std::span<const OpValue* const>;

class Operator {
 public:
  explicit Operator(OpSpec spec) : spec_(std::move(spec)) {}
  virtual ~Operator() = default;
  Operator(const Operator&) = delete;
  Operator& operator=(const Operator&) = delete;

  const OpSpec& spec() const { return spec_; }
  // The output's dims for inputs of these dims (kBatchTimes resolved by `batch`); throws InputError naming
  // the node where the inputs do not fit.
  virtual dims_t output_dims(OpInputs in, std::int64_t batch) const = 0;
  // Builds what forward and backward need (oneDNN primitives, plans) for these inputs and output.
  virtual void setup(Context& /*ctx*/, OpInputs /*in*/, const OpValue& /*out*/, bool /*train*/) {}
  virtual void forward(Context& ctx, OpInputs in, OpValue& out) = 0;
  // Adds to the gradient of each input that has one (grad not null), from out.grad. `scratch` holds at least
  // as many floats as the largest input or output.
  virtual void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) = 0;
  // Whether the output is input 0's numbers as they are (a Reshape's, a Dropout's at ratio 0): it then shares
  // their storage. Constant inputs are known.
  virtual bool aliases_input(OpInputs /*in*/) const { return false; }
  // What backward reads besides the output's gradient, given which inputs take a gradient (`wanted`, by
  // input): input i's numbers, and the output's. The graph layer keeps a value for backward only where some
  // backward reads it and gives the others back to the pool once forward is past them; an operator must
  // not touch what it says it does not read. By default both.
  virtual bool backward_reads_input(std::size_t /*i*/, const std::vector<bool>& /*wanted*/) const { return true; }
  virtual bool backward_reads_output(const std::vector<bool>& /*wanted*/) const { return true; }
  // An operator that draws random numbers (a Dropout's masks): its generator's state, which the graph layer
  // seeds and checkpoints keep, so that a resumed run draws what an unbroken one would. Empty for the others.
  virtual std::span<std::uint64_t> generator_state() { return {}; }

 protected:
  // Input i, which must be given: throws naming the node.
  const OpValue& input(OpInputs in, std::size_t i) const;
  // A constant input's one number (a Clip's bound): `otherwise` where it is left out.
  float constant_number(OpInputs in, std::size_t i, float otherwise) const;
  OpSpec spec_;
};

}  // namespace ddl
