// fold_constants (onnx_graph.hpp): evaluates an ONNX graph's shape arithmetic once for a batch of 1 and once
// for a batch of 2, so that what is left computes only on images and every integer that followed the batch
// is known as kBatch. An evaluation walks the nodes in order: a node whose inputs are all known (constants,
// or the outputs of nodes folded before it) is computed by its operation below; a Shape is known from the
// input's [batch, C, H, W], a constant's dims, or the dims of a value computed on images (value_shapes.hpp).
// Where those are not known (an operator value_shapes does not know), only the value's first dimension is,
// which is always the batch: a Shape of such a value may only be read at index 0 (torch's
// x.view(x.size(0), -1)). A node that reads a parameter (a float initializer) is never folded: it is part
// of what training computes (a weight's Transpose before its MatMul, a class token's Expand).
//
// The table below computes integers (shapes) and moves numbers of either kind. Computation on constant real
// numbers that it lacks (swin_t's attention mask: a ScatterND into zeros, a Sub of two views of it) is the
// registry's operator (core/graph/) run forward on the constants, as a graph layer runs it: the same
// forward as on images, no second interpreter.
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "core/context.hpp"
#include "core/error.hpp"
#include "core/graph/operator_registry.hpp"
#include "core/graph/shape_rules.hpp"
#include "models/onnx/message_text.hpp"
#include "models/onnx/onnx_graph.hpp"
#include "models/onnx/op_spec.hpp"
#include "models/onnx/value_shapes.hpp"

namespace ddl::onnx {
namespace {

using Dims = std::vector<std::int64_t>;

// Shape arithmetic computes a few numbers; a larger result means a corrupt file, and these limits keep it
// from taking the machine's memory: elements in one value, and in all values of one evaluation.
constexpr std::uint64_t kMaxValue = std::uint64_t{1} << 20, kMaxAll = std::uint64_t{1} << 24;
// ONNX's numbers for the data types Cast may give here.
constexpr std::int64_t kFloat = 1, kInt32 = 6, kInt64 = 7, kBool = 9, kDouble = 11;

// One node being folded: its inputs (nullptr where an optional one is left out) and how it reports a problem.
struct Op {
  const Graph& graph;
  const Node& node;
  std::vector<const Constant*> in;

  [[noreturn]] void fail(const std::string& problem) const {
    throw InputError(one_line(graph.source + ": " + node.describe() + ": " + problem));
  }
  bool has(std::size_t i) const { return i < in.size() && in[i]; }
  const Constant& input(std::size_t i) const {
    if (!has(i)) fail("has no input " + std::to_string(i + 1));
    return *in[i];
  }
  const Dims& ints(std::size_t i) const {
    if (!input(i).integer) fail("its input " + std::to_string(i + 1) + " is not of integers");
    return in[i]->ints;
  }
  std::int64_t scalar(std::size_t i) const {
    if (ints(i).size() != 1) fail("its input " + std::to_string(i + 1) + " is not one number");
    return in[i]->ints[0];
  }
  std::int64_t axis(std::int64_t a, std::size_t rank) const {
    const auto r = static_cast<std::int64_t>(rank);
    if (a < -r || a >= r) fail("axis " + std::to_string(a) + " is outside a tensor of rank " + std::to_string(r));
    return a < 0 ? a + r : a;
  }
  // The element count of `dims`, checked before a tensor of them is allocated. The product with each 0
  // counted as 1 bounds every stride too.
  std::size_t size(const Dims& dims) const {
    std::uint64_t bound = 1, n = 1;
    for (const std::int64_t d : dims) {
      if (d < 0) fail("gives a tensor of dims " + dims_text(dims));
      const auto size = static_cast<std::uint64_t>(d);
      if (size > kMaxValue || (bound *= std::max<std::uint64_t>(size, 1)) > kMaxValue)
        fail("gives a tensor of dims " + dims_text(dims) + ", more than 2^20 elements: ddl folds shape arithmetic");
      n *= size;
    }
    return n;
  }
};

// The flat index, offset + sum of i_d * strides[d], of each element (i_0, i_1, ...) of `dims` in row-major order.
std::vector<std::size_t> indices(const Dims& dims, const Dims& strides, std::int64_t offset, std::size_t n) {
  std::vector<std::size_t> out;
  out.reserve(n);
  Dims at(dims.size(), 0);
  for (std::int64_t flat = offset; out.size() < n;) {
    out.push_back(static_cast<std::size_t>(flat));
    for (std::size_t d = dims.size(); d-- > 0;) {
      flat += strides[d];
      if (++at[d] < dims[d]) break;
      flat -= strides[d] * dims[d];
      at[d] = 0;
    }
  }
  return out;
}

// For each element of a tensor of `out` dims, the element of a tensor of `in` dims that broadcasts to it.
std::vector<std::size_t> broadcast_index(const Dims& in, const Dims& out, std::size_t n) {
  return indices(out, shapes::broadcast_strides(in, out), 0, n);
}

Constant take(const Constant& c, const std::vector<std::size_t>& at, Dims dims) {
  Constant out{std::move(dims), c.integer, {}, {}};
  for (const std::size_t i : at)
    if (c.integer)
      out.ints.push_back(c.ints[i]);
    else
      out.floats.push_back(c.floats[i]);
  return out;
}

void same_kind(const Op& op, const Constant& a, const Constant& b) {
  if (a.integer != b.integer) op.fail("mixes integers and real numbers");
}

Constant constant(const Op& op) {
  const auto& a = op.node.attributes;
  if (a.count("value")) {
    const Attribute& value = a.at("value");
    if (value.kind != Attribute::Kind::tensor || !value.t) op.fail("its value is not a tensor");
    return *value.t;
  }
  if (a.count("value_float")) return {{}, false, {op.node.real("value_float", 0)}, {}};
  if (a.count("value_int")) return {{}, true, {}, {op.node.integer("value_int", 0)}};
  if (a.count("value_ints")) {
    Dims v = op.node.integers("value_ints", {});
    return {{static_cast<std::int64_t>(v.size())}, true, {}, std::move(v)};
  }
  if (a.count("value_floats") && a.at("value_floats").kind == Attribute::Kind::reals) {
    const auto& v = a.at("value_floats").floats;
    return {{static_cast<std::int64_t>(v.size())}, false, v, {}};
  }
  op.fail("has no value ddl reads (value, value_float(s), value_int(s))");
}

Constant constant_of_shape(const Op& op) {
  const Dims& dims = op.ints(0);
  const std::size_t n = op.size(dims);
  Constant fill{{}, false, {0.f}, {}};
  if (op.node.attributes.count("value")) {
    const Attribute& value = op.node.attributes.at("value");
    if (!value.t || value.t->size() != 1) op.fail("its value is not one number");
    fill = *value.t;
  }
  Constant out{dims, fill.integer, {}, {}};
  if (fill.integer)
    out.ints.assign(n, fill.ints[0]);
  else
    out.floats.assign(n, fill.floats[0]);
  return out;
}

Constant gather(const Op& op) {
  const Constant& data = op.input(0);
  const Dims& index = op.ints(1);
  const std::size_t axis = op.axis(op.node.integer("axis", 0), data.dims.size());
  Dims dims = shapes::gather(data.dims, static_cast<std::int64_t>(axis), op.in[1]->dims);
  std::vector<std::size_t> at;
  at.reserve(op.size(dims));
  const std::int64_t length = data.dims[axis];
  std::int64_t outer = 1, inner = 1;  // the elements before the axis, and after it
  for (std::size_t d = 0; d < axis; ++d) outer *= data.dims[d];
  for (std::size_t d = axis + 1; d < data.dims.size(); ++d) inner *= data.dims[d];
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i : index) {
      if (i < -length || i >= length)
        op.fail("index " + std::to_string(i) + " is outside [0, " + std::to_string(length) + ")");
      if (i < 0) i += length;
      for (std::int64_t k = 0; k < inner; ++k) at.push_back(static_cast<std::size_t>((o * length + i) * inner + k));
    }
  return take(data, at, std::move(dims));
}

// Unsqueeze's and Squeeze's axes: an input from opset 13, an attribute before.
Dims axes_of(const Op& op) { return op.has(1) ? op.ints(1) : op.node.integers("axes", {}); }

Constant unsqueeze(const Op& op) {
  Constant out = op.input(0);
  out.dims = shapes::unsqueeze(out.dims, axes_of(op));
  return out;
}

// Without axes every axis of size 1 goes: a constant has no batch axis to keep.
Constant squeeze(const Op& op) {
  Constant out = op.input(0);
  out.dims = shapes::squeeze(out.dims, axes_of(op), false);
  return out;
}

// ReduceProd of integers: the element count torch.std and torch.var divide by, a product of a shape's entries.
// Reals go to the registry, which has no such operator.
Constant reduce_prod(const Op& op) {
  const Constant& data = op.input(0);
  const std::size_t rank = data.dims.size();
  std::vector<bool> reduced(rank, axes_of(op).empty() && !op.node.integer("noop_with_empty_axes", 0));
  for (const std::int64_t a : axes_of(op)) reduced[op.axis(a, rank)] = true;
  const bool keep = op.node.integer("keepdims", 1) != 0;
  Dims dims, kept_strides;  // the output's dims, and for each input axis its stride in the output (0: reduced)
  for (std::size_t d = 0; d < rank; ++d)
    if (!reduced[d] || keep) dims.push_back(reduced[d] ? 1 : data.dims[d]);
  std::int64_t stride = 1;
  kept_strides.assign(rank, 0);
  for (std::size_t d = rank; d-- > 0;)
    if (!reduced[d]) {
      kept_strides[d] = stride;
      stride *= data.dims[d];
    }
  Constant out{dims, true, {}, Dims(op.size(dims), 1)};
  for (std::size_t i = 0; i < data.ints.size(); ++i) {
    std::int64_t at = 0, rest = static_cast<std::int64_t>(i);
    for (std::size_t d = rank; d-- > 0;) {
      at += rest % data.dims[d] * kept_strides[d];
      rest /= data.dims[d];
    }
    out.ints[at] *= data.ints[i];
  }
  return out;
}

Constant concat(const Op& op) {
  const Constant& first = op.input(0);
  if (!op.node.attributes.count("axis")) op.fail("has no axis");
  const std::size_t axis = op.axis(op.node.integer("axis", 0), first.dims.size());
  Dims dims = first.dims;
  dims[axis] = 0;
  for (std::size_t i = 0; i < op.in.size(); ++i) {
    const Constant& c = op.input(i);
    same_kind(op, first, c);
    Dims other = c.dims;
    if (other.size() != dims.size()) op.fail("joins tensors of different ranks");
    dims[axis] += other[axis];
    other[axis] = dims[axis];
    if (other != dims) op.fail("joins " + dims_text(c.dims) + " to tensors of other dims");
    op.size(dims);
  }
  Constant out{dims, first.integer, {}, {}};
  std::size_t blocks = 1;  // one block an index of the dimensions before the axis, from each input in turn
  for (std::size_t d = 0; d < axis; ++d) blocks *= dims[d];
  for (std::size_t b = 0; b < blocks; ++b)
    for (const Constant* c : op.in) {
      const std::size_t block = c->size() / blocks;
      if (out.integer)
        out.ints.insert(out.ints.end(), c->ints.begin() + b * block, c->ints.begin() + (b + 1) * block);
      else
        out.floats.insert(out.floats.end(), c->floats.begin() + b * block, c->floats.begin() + (b + 1) * block);
    }
  return out;
}

Constant identity(const Op& op) { return op.input(0); }

Constant cast(const Op& op) {
  Constant out = op.input(0);
  const std::int64_t to = op.node.integer("to", 0);
  if (to == kFloat || to == kDouble) {  // real numbers are held as float
    if (out.integer) out.floats.assign(out.ints.begin(), out.ints.end());
    out.integer = false;
    out.ints.clear();
    return out;
  }
  if (to != kInt32 && to != kInt64 && to != kBool)
    op.fail("casts to data type " + std::to_string(to) + "; ddl folds casts to FLOAT, DOUBLE, INT32, INT64 and BOOL");
  if (!out.integer) {
    constexpr float kLimit = 9223372036854775808.0f;  // 2^63
    for (const float f : out.floats) {
      if (to != kBool && !(f >= -kLimit && f < kLimit)) op.fail("casts " + std::to_string(f) + " to an integer");
      out.ints.push_back(to == kBool ? f != 0 : static_cast<std::int64_t>(f));
    }
    out.integer = true;
    out.floats.clear();
  }
  for (auto& v : out.ints) v = to == kBool ? v != 0 : to == kInt32 ? static_cast<std::int32_t>(v) : v;
  return out;
}

Constant slice(const Op& op) {
  const Constant& data = op.input(0);
  const Dims none;
  const shapes::SlicePlan plan =
      shapes::slice(data.dims, op.ints(1), op.ints(2), op.has(3) ? op.ints(3) : none, op.has(4) ? op.ints(4) : none);
  const std::size_t n = op.size(plan.dims);
  return take(data, n == 0 ? std::vector<std::size_t>{} : indices(plan.dims, plan.strides, plan.offset, n), plan.dims);
}

// F.pad's pads are exported as a transpose of the pairs (begin, end) per axis.
Constant transpose(const Op& op) {
  const Constant& data = op.input(0);
  const Dims strides = shapes::strides_of(data.dims);
  Dims dims, stepped;
  for (const std::int64_t a : shapes::permutation(data.dims, op.node.integers("perm", {}))) {
    dims.push_back(data.dims[a]);
    stepped.push_back(strides[a]);
  }
  const std::size_t n = op.size(dims);
  return take(data, n == 0 ? std::vector<std::size_t>{} : indices(dims, stepped, 0, n), dims);
}

// Equal, Less, Greater, LessOrEqual, GreaterOrEqual of two integer or two real constants: booleans, which are
// integers 0 and 1 here.
Constant compare(const Op& op) {
  const Constant &a = op.input(0), &b = op.input(1);
  same_kind(op, a, b);
  Dims dims = shapes::broadcast(a.dims, b.dims);
  const std::size_t n = op.size(dims);
  const auto ia = broadcast_index(a.dims, dims, n), ib = broadcast_index(b.dims, dims, n);
  const std::string& name = op.node.op;
  enum { equal, less, greater, at_most, at_least };
  const int rule = name == "Equal" ? equal : name == "Less" ? less : name == "Greater" ? greater : name == "LessOrEqual" ? at_most : at_least;
  const auto holds = [rule](auto x, auto y) {
    switch (rule) {
      case equal: return x == y;
      case less: return x < y;
      case greater: return x > y;
      case at_most: return x <= y;
      default: return x >= y;
    }
  };
  Constant out{std::move(dims), true, {}, Dims(n)};
  for (std::size_t k = 0; k < n; ++k)
    out.ints[k] = a.integer ? holds(a.ints[ia[k]], b.ints[ib[k]]) : holds(a.floats[ia[k]], b.floats[ib[k]]);
  return out;
}

Constant where(const Op& op) {
  const Dims& condition = op.ints(0);
  const Constant &x = op.input(1), &y = op.input(2);
  same_kind(op, x, y);
  Dims dims = shapes::broadcast(shapes::broadcast(op.in[0]->dims, x.dims), y.dims);
  const std::size_t n = op.size(dims);
  const auto ic = broadcast_index(op.in[0]->dims, dims, n), ix = broadcast_index(x.dims, dims, n),
             iy = broadcast_index(y.dims, dims, n);
  Constant both = x;
  both.ints.insert(both.ints.end(), y.ints.begin(), y.ints.end());
  both.floats.insert(both.floats.end(), y.floats.begin(), y.floats.end());
  std::vector<std::size_t> at(n);
  for (std::size_t k = 0; k < n; ++k) at[k] = condition[ic[k]] ? ix[k] : x.size() + iy[k];
  return take(both, at, std::move(dims));
}

Constant expand(const Op& op) {
  const Constant& data = op.input(0);
  Dims dims = shapes::broadcast(data.dims, op.ints(1));
  const std::size_t n = op.size(dims);
  const auto at = broadcast_index(data.dims, dims, n);
  return take(data, at, std::move(dims));
}

Constant range(const Op& op) {
  const std::int64_t start = op.scalar(0), limit = op.scalar(1), delta = op.scalar(2);
  std::int64_t span = 0, count = 0;
  if (delta == 0) op.fail("has a step of 0");
  if (__builtin_sub_overflow(limit, start, &span)) op.fail("spans more than int64 holds");
  if (delta > 0 && span > 0) count = (span - 1) / delta + 1;
  if (delta < 0 && span < 0) count = (span + 1) / delta + 1;
  Constant out{{count}, true, {}, Dims(op.size({count}))};
  for (std::int64_t k = 0; k < count; ++k) out.ints[k] = start + k * delta;
  return out;
}

// x mod y: with fmod the sign of x (C's %), without it the sign of y (Python's %, as PyTorch exports it).
std::int64_t modulo(const Op& op, std::int64_t x, std::int64_t y) {
  if (y == 0) op.fail("divides by 0");
  if (y == -1) return 0;  // x % -1 overflows for the smallest x
  const std::int64_t r = x % y;
  return op.node.integer("fmod", 0) == 0 && r != 0 && (r < 0) != (y < 0) ? r + y : r;
}

// Add, Sub, Mul, Div and Mod, on integers (shapes); on real numbers they are the registry's (run_operator).
Constant arithmetic(const Op& op) {
  const Constant &a = op.input(0), &b = op.input(1);
  same_kind(op, a, b);
  Dims dims = shapes::broadcast(a.dims, b.dims);
  const std::size_t n = op.size(dims);
  const auto ia = broadcast_index(a.dims, dims, n), ib = broadcast_index(b.dims, dims, n);
  Constant out{std::move(dims), true, {}, Dims(n)};
  const std::string& name = op.node.op;
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t x = a.ints[ia[k]], y = b.ints[ib[k]];
    std::int64_t& r = out.ints[k];
    bool overflow = false;
    if (name == "Add") overflow = __builtin_add_overflow(x, y, &r);
    if (name == "Sub") overflow = __builtin_sub_overflow(x, y, &r);
    if (name == "Mul") overflow = __builtin_mul_overflow(x, y, &r);
    if (name == "Div") {
      if (y == 0) op.fail("divides by 0");
      overflow = y == -1 && x == std::numeric_limits<std::int64_t>::min();
      if (!overflow) r = x / y;
    }
    if (name == "Mod") r = modulo(op, x, y);
    if (overflow) op.fail("overflows int64");
  }
  return out;
}

Constant reshape(const Op& op) {
  Constant out = op.input(0);
  out.dims = shapes::reshape(out.dims, op.ints(1), op.node.integer("allowzero", 0) != 0);
  return out;
}

// Not, And, Or and Xor of booleans (a comparison's 0s and 1s).
Constant logical(const Op& op) {
  Constant out = op.input(0);
  if (!out.integer || (op.node.op != "Not" && !op.input(1).integer)) op.fail("takes booleans, not real numbers");
  if (op.node.op == "Not") {
    for (auto& v : out.ints) v = v == 0;
    return out;
  }
  const Constant& b = op.input(1);
  Dims dims = shapes::broadcast(out.dims, b.dims);
  const std::size_t n = op.size(dims);
  const auto ia = broadcast_index(out.dims, dims, n), ib = broadcast_index(b.dims, dims, n);
  Constant result{std::move(dims), true, {}, Dims(n)};
  const bool conjunction = op.node.op == "And", disjunction = op.node.op == "Or";  // else Xor
  for (std::size_t k = 0; k < n; ++k) {
    const bool x = out.ints[ia[k]] != 0, y = b.ints[ib[k]] != 0;
    result.ints[k] = conjunction ? x && y : disjunction ? x || y : x != y;
  }
  return result;
}

struct Fold {
  Constant (*compute)(const Op&);
  bool reals;  // whether it takes real numbers too (it moves or compares them); else the registry computes on them
};
const std::map<std::string, Fold>& operations() {
  static const std::map<std::string, Fold> table = {{"Constant", {constant, true}},
                                                    {"ConstantOfShape", {constant_of_shape, true}},
                                                    {"Gather", {gather, true}},
                                                    {"Unsqueeze", {unsqueeze, true}},
                                                    {"Squeeze", {squeeze, true}},
                                                    {"Concat", {concat, true}},
                                                    {"Cast", {cast, true}},
                                                    {"Slice", {slice, true}},
                                                    {"Equal", {compare, true}},
                                                    {"Less", {compare, true}},
                                                    {"Greater", {compare, true}},
                                                    {"LessOrEqual", {compare, true}},
                                                    {"GreaterOrEqual", {compare, true}},
                                                    {"Where", {where, true}},
                                                    {"Expand", {expand, true}},
                                                    {"Reshape", {reshape, true}},
                                                    {"Transpose", {transpose, true}},
                                                    {"Identity", {identity, true}},
                                                    {"Range", {range, false}},
                                                    {"Not", {logical, false}},
                                                    {"And", {logical, false}},
                                                    {"Or", {logical, false}},
                                                    {"Xor", {logical, false}},
                                                    {"Add", {arithmetic, false}},
                                                    {"Sub", {arithmetic, false}},
                                                    {"Mul", {arithmetic, false}},
                                                    {"Div", {arithmetic, false}},
                                                    {"Mod", {arithmetic, false}},
                                                    {"ReduceProd", {reduce_prod, false}}};
  return table;
}

// The registry's operator for the node run forward on its constants: real numbers as values, integers as
// the numbers an operator takes (a ScatterND's indices, a Reshape's shape), as a graph layer gives them.
Constant run_operator(const Op& op, Context& ctx, std::int64_t batch) {
  if (!find_operator(op.node.op)) op.fail("computes on constants only, and ddl folds only shape arithmetic");
  std::vector<OpValue> held(op.in.size());
  std::vector<const OpValue*> in(op.in.size(), nullptr);
  for (std::size_t i = 0; i < op.in.size(); ++i)
    if (op.has(i) && !op.in[i]->integer) {
      held[i] = {op.in[i]->dims, const_cast<float*>(op.in[i]->floats.data()), nullptr, true};
      in[i] = &held[i];
    }
  const std::unique_ptr<Operator> made = make_operator(op_spec(op.graph.source, op.node, op.in));
  OpValue out{made->output_dims(in, batch), nullptr, nullptr, false};
  // A Dropout that drops nothing (ratio 0, training_mode false) is its input; folded, one that drops would
  // draw its mask once (or, set up for evaluation, never): it is a graph's operator.
  if (!made->generator_state().empty()) {
    if (made->aliases_input(in)) return op.input(0);
    op.fail("draws random numbers on constants only, which ddl does not fold");
  }
  Constant value{out.dims, false, std::vector<float>(op.size(out.dims)), {}};
  out.data = value.floats.data();
  made->setup(ctx, in, out, false);
  made->forward(ctx, in, out);
  if (op.node.op == "ArgMax" || op.node.op == "ArgMin") {  // ONNX's indices are int64
    value.integer = true;
    value.ints.assign(value.floats.begin(), value.floats.end());
    value.floats.clear();
  }
  return value;
}

// The node's value from its known inputs: by the table, or by the registry's operator where it computes on real
// numbers that the table does not.
Constant fold_node(const Op& op, std::int64_t batch, std::unique_ptr<Context>& ctx) {
  const auto fold = operations().find(op.node.op);
  const bool reals = std::any_of(op.in.begin(), op.in.end(), [](const Constant* c) { return c && !c->integer; });
  const bool registry = fold == operations().end() || (reals && !fold->second.reals);
  if (registry && !reals) op.fail("computes on constants only, and ddl folds only shape arithmetic");
  // A second output would be left without the node that gives it.
  if (op.node.outputs.size() != 1) op.fail("has " + std::to_string(op.node.outputs.size()) + " outputs; ddl folds one");
  try {
    if (!registry) return fold->second.compute(op);
    if (!ctx) ctx = std::make_unique<Context>();
    return run_operator(op, *ctx, batch);
  } catch (const shapes::ShapeError& e) {
    op.fail(e.what());
  }
}

// What one evaluation knows: the outputs of the nodes it folded.
struct Evaluation {
  std::vector<bool> folded;  // by node
  std::map<std::string, Constant> values;
  std::map<std::string, Dims> shapes;  // of the values computed on images, where value_shapes knows them
  // A Shape's output -> the value whose shape it is, where ddl knows only the first dimension, the batch.
  std::map<std::string, std::string> batch_only;

  // A value folded or a constant of the graph; nullptr for one computed on images.
  const Constant* known(const Graph& graph, const std::string& name) const {
    if (const auto it = values.find(name); it != values.end()) return &it->second;
    if (const auto it = graph.constants.find(name); it != graph.constants.end()) return &it->second;
    return nullptr;
  }
};

// A Shape node: its value where the dims of its input are known; else only its first dimension, the batch,
// may be read further on.
void fold_shape(const Op& op, Evaluation& e) {
  const std::string &of = op.node.inputs[0], &out = op.node.outputs[0];
  if (of.empty() || op.node.outputs.size() != 1) op.fail("is not a Shape of one input to one output");
  const auto image = e.shapes.find(of);
  const Constant* value = e.known(op.graph, of);
  const Dims dims = image != e.shapes.end() ? image->second : value ? value->dims : Dims();
  const auto rank = static_cast<std::int64_t>(dims.size());
  const auto clamp = [&](std::int64_t v) { return std::clamp<std::int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const std::int64_t first = clamp(op.node.integer("start", 0)), last = clamp(op.node.integer("end", rank));
  if (image == e.shapes.end() && !value) {
    if (first != 0 || e.batch_only.count(of))
      op.fail("needs the shape of '" + of + "', which ddl cannot know before the layers are built");
    e.batch_only[out] = of;
    return;
  }
  e.values[out] = {{std::max<std::int64_t>(last - first, 0)}, true, {}, {}};
  if (last > first) e.values[out].ints.assign(dims.begin() + first, dims.begin() + last);
}

// The dims of what a node computes on images (or parameters), where value_shapes knows them.
std::optional<Dims> dims_on_images(const Op& op, const std::map<std::string, Dims>& shapes, std::int64_t batch) {
  std::vector<std::optional<Dims>> dims;
  for (std::size_t k = 0; k < op.node.inputs.size(); ++k) {
    const auto image = shapes.find(op.node.inputs[k]);
    dims.push_back(image != shapes.end() ? std::optional<Dims>(image->second)
                   : op.in[k]             ? std::optional<Dims>(op.in[k]->dims)
                                          : std::nullopt);
  }
  return output_dims(op.node, dims, op.in, batch);
}

// The dims of each part of a Split computed on images, where its input's and sizes are known (a value after
// F.glu read by shape arithmetic).
void split_dims(const Op& op, std::map<std::string, Dims>& shapes) {
  const auto in = shapes.find(op.node.inputs.at(0));
  if (in == shapes.end()) return;
  const auto sizes = split_sizes(op.node, &in->second, op.has(1) ? op.in[1] : nullptr);
  if (!sizes) return;
  for (std::size_t k = 0; k < op.node.outputs.size(); ++k) {
    Dims part = in->second;
    part[*axis_of(op.node, in->second)] = (*sizes)[k];
    shapes[op.node.outputs[k]] = std::move(part);
  }
}

// `ctx`: the oneDNN engine the registry's operators run on, made where one is first needed.
Evaluation evaluate(const Graph& graph, std::int64_t batch, std::unique_ptr<Context>& ctx) {
  Evaluation e;
  e.folded.assign(graph.nodes.size(), false);
  std::map<std::string, Dims>& shapes = e.shapes;
  shapes[graph.input] = graph.image_shape;
  shapes[graph.input].insert(shapes[graph.input].begin(), batch);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    Op op{graph, node, {}};
    if (node.outputs.empty() || node.outputs[0].empty()) continue;
    const std::string& out = node.outputs[0];
    if (node.op == "Shape" && node.inputs.size() == 1) {
      fold_shape(op, e);
      e.folded[i] = true;
      continue;
    }
    bool on_images = false, batch_size = false;
    for (const std::string& in : node.inputs) {
      if (in.empty()) {
        op.in.push_back(nullptr);
      } else if (const auto it = e.batch_only.find(in); it != e.batch_only.end()) {
        // Index 0 of a shape whose other dimensions ddl does not know: the batch.
        const Constant* index = node.inputs.size() == 2 && in == node.inputs[0] ? e.known(graph, node.inputs[1]) : nullptr;
        const bool reads_batch = node.op == "Gather" && node.integer("axis", 0) == 0 && index && index->integer &&
                                 std::all_of(index->ints.begin(), index->ints.end(), [](auto v) { return v == 0; });
        if (!reads_batch)
          op.fail("needs the shape of '" + it->second + "', which ddl cannot know before the layers are built");
        op.in.push_back(nullptr);
        batch_size = true;
      } else {
        op.in.push_back(e.known(graph, in));
        on_images = on_images || !op.in.back();
      }
    }
    const bool on_parameters = std::any_of(node.inputs.begin(), node.inputs.end(), [&](const std::string& in) {
      return graph.initializers.count(in) && !graph.constants.at(in).integer;
    });
    // PyTorch's export merges initializers that share storage and, in eval mode, those of equal values (zero
    // biases) too, and hands the one left to each user through an Identity: trained, they would be one
    // parameter where the module has several, and ddl keeps one parameter under one name.
    if (on_parameters && node.op == "Identity")
      op.fail(
          "passes on initializer '" + node.inputs.at(0) +
          "' under another name, as PyTorch's export does with initializers of equal values in eval mode "
          "(export with model.train(), training=torch.onnx.TrainingMode.TRAINING and do_constant_folding=False, "
          "as launch/export_onnx.py does) and with parameters that modules share, which ddl does not take this way");
    if (on_images || on_parameters) {
      if (node.op == "Split")
        split_dims(op, shapes);
      else if (auto computed = dims_on_images(op, shapes, batch))
        shapes[out] = std::move(*computed);
      continue;
    }
    Constant value = batch_size ? Constant{op.in[1]->dims, true, {}, Dims(op.size(op.in[1]->dims), batch)}
                                : fold_node(op, batch, ctx);
    // A Constant's value is the file's; what is computed from it is bounded in all.
    if (node.op != "Constant" && (total += value.size()) > kMaxAll) op.fail("takes folding past 2^24 values in all");
    e.values[out] = std::move(value);
    e.folded[i] = true;
  }
  return e;
}

// The value as the graph keeps it: integers that were k times the batch size in both evaluations become kBatch * k; any
// other difference between them is a use of the batch that ddl cannot express.
Constant keep_batch(const Graph& graph, const Node& node, Constant one, const Constant& two) {
  const auto fail = [&](const std::string& problem) {
    throw InputError(one_line(graph.source + ": " + node.describe() + ": " + problem));
  };
  if (one.dims != two.dims || one.integer != two.integer) fail("the shape of its result changes with the batch size");
  if (!one.integer && std::memcmp(one.floats.data(), two.floats.data(), one.floats.size() * sizeof(float)) != 0)
    fail("its result changes with the batch size");
  for (std::size_t k = 0; k < one.ints.size(); ++k)
    if (one.ints[k] != two.ints[k]) {
      // k times the batch (a [tokens * batch, features] view of a transformer's activations): kBatch * k.
      if (one.ints[k] < 1 || one.ints[k] > (std::int64_t{1} << 24) || two.ints[k] != 2 * one.ints[k])
        fail("its result changes with the batch size, but is not a multiple of it");
      one.ints[k] *= kBatch;
    }
  return one;
}

}  // namespace

void fold_constants(Graph& graph) {
  // An operator ddl has no rule for is named first, before another node fails on its account (an nn.GRU's
  // zero state, a ConstantOfShape of the batch, would be blamed otherwise). Split becomes Slices later.
  for (const Node& node : graph.nodes)
    if (!find_operator(node.op) && !operations().count(node.op) && node.op != "Shape" && node.op != "Split")
      Op{graph, node, {}}.fail("ddl does not support this operator (docs/onnx.md lists those it does)");
  Evaluation one, two;
  std::unique_ptr<Context> ctx;
  try {
    one = evaluate(graph, 1, ctx);
    two = evaluate(graph, 2, ctx);
  } catch (const InputError& e) {
    // Node's accessors name the node, not the file.
    if (std::string_view(e.what()).starts_with(graph.source + ": ")) throw;
    throw InputError(one_line(graph.source + ": " + e.what()));
  }
  for (const auto& [name, dims] : one.shapes) graph.dims[name] = dims;
  // An output declared with a named class dim (an einsum's, before its bias: "Addlogits_dim_1") has its count
  // from the shapes.
  if (const auto out = graph.dims.find(graph.output);
      graph.classes <= 0 && out != graph.dims.end() && out->second.size() == 2)
    graph.classes = out->second[1];
  for (const auto& [name, dims] : one.shapes)
    if (const auto it = two.shapes.find(name); it != two.shapes.end() && it->second.size() == dims.size())
      for (std::size_t d = 0; d < dims.size(); ++d)
        if (dims[d] >= 1 && it->second[d] == 2 * dims[d]) {
          graph.batch_axes[name] = {static_cast<int>(d), dims[d]};
          break;
        }
  std::set<std::string> used = {graph.output};
  for (std::size_t i = 0; i < graph.nodes.size(); ++i)
    if (!one.folded[i]) used.insert(graph.nodes[i].inputs.begin(), graph.nodes[i].inputs.end());
  if (one.values.count(graph.output) || graph.constants.count(graph.output))
    throw InputError(one_line(graph.source + ": output '" + graph.output + "' does not depend on the input image"));
  std::vector<Node> left;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    if (!one.folded[i]) {
      left.push_back(std::move(node));
      continue;
    }
    const auto value = one.values.find(node.outputs[0]);
    if (value != one.values.end() && used.count(value->first))
      graph.constants[value->first] = keep_batch(graph, node, value->second, two.values.at(value->first));
  }
  graph.nodes = std::move(left);
}

}  // namespace ddl::onnx
