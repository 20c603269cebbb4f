// The element-wise family: functions of one value (on oneDNN's eltwise where it has the function, loops
// otherwise), arithmetic, comparisons and logic of two with numpy's broadcasting, and Where.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <optional>

#include "core/graph/operator_registry.hpp"
#include "core/graph/tensor_walk.hpp"

namespace ddl {
namespace {

using walk::dim;

// An element-wise function on oneDNN's eltwise primitive: forward, and backward from the input.
class EltwiseOp : public Operator {
 public:
  EltwiseOp(OpSpec spec, dnnl::algorithm algorithm, float alpha, float beta)
      : Operator(std::move(spec)), algorithm_(algorithm), alpha_(alpha), beta_(beta) {}
  dims_t output_dims(OpInputs in, std::int64_t) const override { return input(in, 0).dims; }
  void setup(Context& ctx, OpInputs in, const OpValue& out, bool train) override {
    if (spec_.type == "Clip") {  // since opset 11 its bounds are inputs
      alpha_ = constant_number(in, 1, spec_.real("min", -std::numeric_limits<float>::max()));
      beta_ = constant_number(in, 2, spec_.real("max", std::numeric_limits<float>::max()));
    }
    md_ = walk::flat(out.dims);
    const auto prop = train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    const auto fwd = make_eltwise_forward_pd(ctx.engine(), prop, algorithm_, md_, alpha_, beta_);
    forward_ = dnnl::eltwise_forward(fwd);
    if (train)
      backward_ = dnnl::eltwise_backward(make_eltwise_backward_pd(ctx.engine(), algorithm_, md_, md_, alpha_, beta_, fwd));
  }
  void forward(Context& ctx, OpInputs in, OpValue& out) override {
    forward_.execute(ctx.stream(), {{DNNL_ARG_SRC, walk::over(md_, ctx, in[0]->data)}, {DNNL_ARG_DST, walk::over(md_, ctx, out.data)}});
  }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) override {
    if (!in[0]->grad) return;
    backward_->execute(ctx.stream(), {{DNNL_ARG_SRC, walk::over(md_, ctx, in[0]->data)},
                                      {DNNL_ARG_DIFF_DST, walk::over(md_, ctx, out.grad)},
                                      {DNNL_ARG_DIFF_SRC, walk::over(md_, ctx, scratch)}});
    walk::add_into(in[0]->grad, scratch, product(out.dims));
  }
  bool backward_reads_input(std::size_t i, const std::vector<bool>&) const override { return i == 0; }
  bool backward_reads_output(const std::vector<bool>&) const override { return false; }

 private:
  dnnl::algorithm algorithm_;
  float alpha_, beta_;
  dnnl::memory::desc md_;
  dnnl::eltwise_forward forward_;
  std::optional<dnnl::eltwise_backward> backward_;
};

template <dnnl::algorithm A>
std::unique_ptr<Operator> eltwise(OpSpec spec) {
  float alpha = 0, beta = 0;
  if (spec.type == "LeakyRelu") alpha = spec.real("alpha", 0.01f);
  if (spec.type == "Elu") alpha = spec.real("alpha", 1.0f);
  if (spec.type == "HardSwish") alpha = 1.0f / 6, beta = 0.5f;  // oneDNN 3 takes them; 2.6 has them fixed
  if (spec.type == "Gelu" && spec.text("approximate", "none") == "tanh")
    return std::make_unique<EltwiseOp>(std::move(spec), dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
  return std::make_unique<EltwiseOp>(std::move(spec), A, alpha, beta);
}

// Rules whose output is flat in their inputs wherever it is defined, marked `flat`: comparisons and logic
// (0 or 1, PyTorch's bool tensors) and the steps Sign, Floor, Ceil and Round. No gradient flows back through
// them, as in PyTorch; they have no slopes.
template <class Rule>
constexpr bool kFlat = requires { Rule::flat; };

// An element-wise function by loops: Rule::f(x, alpha, beta) and its slope Rule::df(x, y, alpha, beta).
template <class Rule>
class LoopUnary : public Operator {
 public:
  explicit LoopUnary(OpSpec spec) : Operator(std::move(spec)) {
    alpha_ = spec_.real("alpha", Rule::alpha);
    beta_ = spec_.real(Rule::beta_name, Rule::beta);
  }
  dims_t output_dims(OpInputs in, std::int64_t) const override { return input(in, 0).dims; }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const std::size_t n = product(out.dims);
    const float *x = in[0]->data, a = alpha_, b = beta_;
    float* y = out.data;
#pragma omp parallel for if (n >= walk::kParallelFrom)
    for (std::size_t i = 0; i < n; ++i) y[i] = Rule::f(x[i], a, b);
  }
  void backward(Context&, [[maybe_unused]] OpInputs in, [[maybe_unused]] const OpValue& out, float*) override {
    if constexpr (!kFlat<Rule>) {
      float* gx = in[0]->grad;
      if (!gx) return;
      const std::size_t n = product(out.dims);
      const float *x = in[0]->data, *y = out.data, *gy = out.grad, a = alpha_, b = beta_;
#pragma omp parallel for if (n >= walk::kParallelFrom)
      for (std::size_t i = 0; i < n; ++i) gx[i] += gy[i] * Rule::df(x[i], y[i], a, b);
    }
  }

 private:
  float alpha_, beta_;
};

struct NoParams {
  static constexpr float alpha = 0, beta = 0;
  static constexpr const char* beta_name = "beta";
};
struct Erf : NoParams {
  static float f(float x, float, float) { return std::erf(x); }
  static float df(float x, float, float, float) { return 2.0f / std::sqrt(std::numbers::pi_v<float>) * std::exp(-x * x); }
};
struct Neg : NoParams {
  static float f(float x, float, float) { return -x; }
  static float df(float, float, float, float) { return -1.0f; }
};
struct Reciprocal : NoParams {
  static float f(float x, float, float) { return 1.0f / x; }
  static float df(float, float y, float, float) { return -y * y; }
};
struct Softplus : NoParams {  // log(1 + e^x), without overflow
  static float f(float x, float, float) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
  static float df(float x, float, float, float) { return 1.0f / (1.0f + std::exp(-x)); }
};
struct Softsign : NoParams {
  static float f(float x, float, float) { return x / (1.0f + std::abs(x)); }
  static float df(float x, float, float, float) { return 1.0f / ((1.0f + std::abs(x)) * (1.0f + std::abs(x))); }
};
struct Selu {  // ONNX's defaults are SELU's constants
  static constexpr float alpha = 1.67326319217681884765625f, beta = 1.05070102214813232421875f;
  static constexpr const char* beta_name = "gamma";
  static float f(float x, float a, float g) { return x > 0 ? g * x : g * a * (std::exp(x) - 1.0f); }
  static float df(float x, float, float a, float g) { return x > 0 ? g : g * a * std::exp(x); }
};
struct Celu {
  static constexpr float alpha = 1, beta = 0;
  static constexpr const char* beta_name = "beta";
  static float f(float x, float a, float) { return x > 0 ? x : a * (std::exp(x / a) - 1.0f); }
  static float df(float x, float, float a, float) { return x > 0 ? 1.0f : std::exp(x / a); }
};
struct HardSigmoid {  // max(0, min(1, alpha x + beta)): oneDNN 2.6 has no such function
  static constexpr float alpha = 0.2f, beta = 0.5f;
  static constexpr const char* beta_name = "beta";
  static float f(float x, float a, float b) { return std::clamp(a * x + b, 0.0f, 1.0f); }
  static float df(float x, float, float a, float b) {
    const float z = a * x + b;
    return z > 0.0f && z < 1.0f ? a : 0.0f;
  }
};

// The steps, and Not of 0s and 1s: flat.
struct Step : NoParams {
  static constexpr bool flat = true;
};
struct Sign : Step {
  static float f(float x, float, float) { return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f; }
};
struct Floor : Step {
  static float f(float x, float, float) { return std::floor(x); }
};
struct Ceil : Step {
  static float f(float x, float, float) { return std::ceil(x); }
};
struct Round : Step {  // halves to even, as ONNX and torch.round: the default rounding mode's
  static float f(float x, float, float) { return std::nearbyint(x); }
};
struct Not : Step {
  static float f(float x, float, float) { return x == 0.0f ? 1.0f : 0.0f; }
};

// What a binary rule's slope reads: of a, b and the output y, Rule::da_reads and Rule::db_reads where the rule
// says, all three where it does not. What it does not read is passed as 0, never loaded.
enum BinaryReads : int { kReadsA = 1, kReadsB = 2, kReadsY = 4 };
template <class Rule>
constexpr int da_reads() {
  if constexpr (requires { Rule::da_reads; }) return Rule::da_reads;
  return kReadsA | kReadsB | kReadsY;
}
template <class Rule>
constexpr int db_reads() {
  if constexpr (requires { Rule::db_reads; }) return Rule::db_reads;
  return kReadsA | kReadsB | kReadsY;
}

// Two values with numpy's broadcasting: Rule::f(a, b), and the slopes Rule::da(a, b, y) and Rule::db(a, b, y).
template <class Rule>
class Binary : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    return shapes::broadcast(input(in, 0).dims, input(in, 1).dims);
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const OpValue &a = *in[0], &b = *in[1];
    const float *x0 = a.data, *x1 = b.data;
    float* y = out.data;
    walk::in_parallel(out.dims, shapes::broadcast_strides(a.dims, out.dims), shapes::broadcast_strides(b.dims, out.dims),
                      [&](std::size_t o, dim i, dim j) { y[o] = Rule::f(x0[i], x1[j]); });
  }
  void backward(Context&, [[maybe_unused]] OpInputs in, [[maybe_unused]] const OpValue& out, float*) override {
    if constexpr (!kFlat<Rule>) slopes(in, out);
  }
  bool backward_reads_input(std::size_t i, const std::vector<bool>& wanted) const override {
    return reads(i == 0 ? kReadsA : kReadsB, wanted);
  }
  bool backward_reads_output(const std::vector<bool>& wanted) const override { return reads(kReadsY, wanted); }

 private:
  static bool reads(int what, const std::vector<bool>& wanted) {
    if constexpr (kFlat<Rule>) return false;
    return (wanted.at(0) && (da_reads<Rule>() & what)) || (wanted.at(1) && (db_reads<Rule>() & what));
  }
  void slopes(OpInputs in, const OpValue& out) {
    const OpValue &a = *in[0], &b = *in[1];
    const dims_t sa = shapes::broadcast_strides(a.dims, out.dims), sb = shapes::broadcast_strides(b.dims, out.dims);
    const float *x0 = a.data, *x1 = b.data, *y = out.data, *gy = out.grad;
    // An operand of the output's dims takes each element's gradient once: its rows can be shared among the
    // threads. A broadcast one sums many into each element.
    const auto each_for = [&](const OpValue& x, auto&& fn) {
      x.dims == out.dims ? walk::in_parallel(out.dims, sa, sb, fn) : walk::each(out.dims, sa, sb, fn);
    };
    constexpr int ra = da_reads<Rule>(), rb = db_reads<Rule>();
    if (float* g0 = a.grad)
      each_for(a, [&](std::size_t o, dim i, dim j) {
        g0[i] += gy[o] * Rule::da(ra & kReadsA ? x0[i] : 0.0f, ra & kReadsB ? x1[j] : 0.0f, ra & kReadsY ? y[o] : 0.0f);
      });
    if (float* g1 = b.grad)
      each_for(b, [&](std::size_t o, dim i, dim j) {
        g1[j] += gy[o] * Rule::db(rb & kReadsA ? x0[i] : 0.0f, rb & kReadsB ? x1[j] : 0.0f, rb & kReadsY ? y[o] : 0.0f);
      });
  }
};

struct AddRule {
  static constexpr int da_reads = 0, db_reads = 0;
  static float f(float a, float b) { return a + b; }
  static float da(float, float, float) { return 1; }
  static float db(float, float, float) { return 1; }
};
struct SubRule {
  static constexpr int da_reads = 0, db_reads = 0;
  static float f(float a, float b) { return a - b; }
  static float da(float, float, float) { return 1; }
  static float db(float, float, float) { return -1; }
};
struct MulRule {
  static constexpr int da_reads = kReadsB, db_reads = kReadsA;
  static float f(float a, float b) { return a * b; }
  static float da(float, float b, float) { return b; }
  static float db(float a, float, float) { return a; }
};
struct DivRule {
  static constexpr int da_reads = kReadsB, db_reads = kReadsB | kReadsY;
  static float f(float a, float b) { return a / b; }
  static float da(float, float b, float) { return 1 / b; }
  static float db(float, float b, float y) { return -y / b; }
};
struct PowRule {
  static float f(float a, float b) { return b == 2.0f ? a * a : std::pow(a, b); }
  static float da(float a, float b, float) { return b == 2.0f ? 2.0f * a : b * std::pow(a, b - 1.0f); }
  static float db(float a, float, float y) { return a > 0 ? y * std::log(a) : 0.0f; }
};
// Min and Max of two: the gradient goes to the one taken (the first where they are equal).
struct MaxRule {
  static float f(float a, float b) { return std::max(a, b); }
  static float da(float a, float b, float) { return a >= b ? 1.0f : 0.0f; }
  static float db(float a, float b, float) { return a >= b ? 0.0f : 1.0f; }
};
struct MinRule {
  static float f(float a, float b) { return std::min(a, b); }
  static float da(float a, float b, float) { return a <= b ? 1.0f : 0.0f; }
  static float db(float a, float b, float) { return a <= b ? 0.0f : 1.0f; }
};
struct PReluRule {  // x, and the trained slope for x < 0
  static float f(float x, float s) { return x < 0 ? s * x : x; }
  static float da(float x, float s, float) { return x < 0 ? s : 1.0f; }
  static float db(float x, float, float) { return x < 0 ? x : 0.0f; }
};
// a mod b, with the sign of b (fmod 0: Python's %, torch.remainder) or of a (fmod 1: C's fmod, torch.fmod).
// PyTorch's slopes: 1 in a, and -floor(a / b) (remainder) or -trunc(a / b) (fmod) in b.
template <bool C>
struct ModRule {
  static float f(float a, float b) {
    float r = std::fmod(a, b);
    if (!C && r != 0.0f && (r < 0.0f) != (b < 0.0f)) r += b;
    return r;
  }
  static float da(float, float, float) { return 1.0f; }
  static float db(float a, float b, float) { return C ? -std::trunc(a / b) : -std::floor(a / b); }
};

// Comparisons and logic: 1 or 0, flat. Logic reads any number but 0 as true.
template <class Compare>
struct Predicate {
  static constexpr bool flat = true;
  static float f(float a, float b) { return Compare{}(a, b) ? 1.0f : 0.0f; }
};
struct Xor {
  bool operator()(float a, float b) const { return (a != 0.0f) != (b != 0.0f); }
};
struct And {
  bool operator()(float a, float b) const { return a != 0.0f && b != 0.0f; }
};
struct Or {
  bool operator()(float a, float b) const { return a != 0.0f || b != 0.0f; }
};

std::unique_ptr<Operator> modulo(OpSpec spec) {
  const std::int64_t fmod = spec.integer("fmod", 0);
  if (fmod != 0 && fmod != 1) spec.fail("its fmod " + std::to_string(fmod) + " is not 0 or 1");
  if (fmod == 1) return std::make_unique<Binary<ModRule<true>>>(std::move(spec));
  return std::make_unique<Binary<ModRule<false>>>(std::move(spec));
}

// Min and Max take two values in ddl (ONNX allows any number).
template <class Rule>
std::unique_ptr<Operator> two_of(OpSpec spec) {
  if (spec.inputs.size() != 2) spec.fail("ddl takes " + spec.type + " of two values");
  return std::make_unique<Binary<Rule>>(std::move(spec));
}

// Where(condition, x, y): x where the condition holds, else y, with numpy's broadcasting of all three. The
// condition is known before the graph runs (a mask made of the image's size, as swin_t's), or a value of
// 0s and 1s.
class WhereOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    return shapes::broadcast(shapes::broadcast(condition_dims(in), input(in, 1).dims), input(in, 2).dims);
  }
  void setup(Context&, OpInputs in, const OpValue& out, bool) override {
    const dims_t c = condition_dims(in);
    take_x_.assign(product(out.dims), 0);
    const auto* given = spec_.integer_input(0);
    walk::each(out.dims, shapes::broadcast_strides(c, out.dims), dims_t(out.dims.size(), 0),
               [&](std::size_t o, dim i, dim) { take_x_[o] = given ? (*given)[i] != 0 : 2; });
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const float* c = spec_.integer_input(0) ? nullptr : in[0]->data;
    const dims_t sc = shapes::broadcast_strides(condition_dims(in), out.dims);
    const dims_t sx = shapes::broadcast_strides(in[1]->dims, out.dims), sy = shapes::broadcast_strides(in[2]->dims, out.dims);
    walk::each(out.dims, sx, sy, [&](std::size_t o, dim i, dim j) { out.data[o] = taken(o, c, sc, out.dims) ? in[1]->data[i] : in[2]->data[j]; });
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    const float* c = spec_.integer_input(0) ? nullptr : in[0]->data;
    const dims_t sc = shapes::broadcast_strides(condition_dims(in), out.dims);
    const dims_t sx = shapes::broadcast_strides(in[1]->dims, out.dims), sy = shapes::broadcast_strides(in[2]->dims, out.dims);
    walk::each(out.dims, sx, sy, [&](std::size_t o, dim i, dim j) {
      float* g = taken(o, c, sc, out.dims) ? in[1]->grad : in[2]->grad;
      if (g) g[g == in[1]->grad ? i : j] += out.grad[o];
    });
  }

 private:
  dims_t condition_dims(OpInputs in) const {
    if (spec_.integer_input(0)) return spec_.integers.at(0).dims;
    return input(in, 0).dims;
  }
  // Whether element o takes x: from the known mask, or from the condition value's element.
  bool taken(std::size_t o, const float* c, const dims_t& sc, const dims_t& dims) const {
    if (take_x_[o] != 2) return take_x_[o] != 0;
    dim at = 0, rest = static_cast<dim>(o);
    for (std::size_t d = dims.size(); d-- > 0;) {
      at += (rest % dims[d]) * sc[d];
      rest /= dims[d];
    }
    return c[at] != 0.0f;
  }
  std::vector<unsigned char> take_x_;  // by output element: 1 x, 0 y, 2 read the condition value
};

using dnnl::algorithm;
constexpr std::string_view kComparison = "numpy broadcasting; 1 or 0, no gradient";
constexpr std::string_view kLogic = "of 0s and 1s (any other number true); no gradient";
constexpr std::string_view kStep = "zero gradient, as PyTorch's";
const OperatorRecord kElementwiseRecords[] = {
    {"Relu", "element-wise", eltwise<algorithm::eltwise_relu>, ""},
    {"LeakyRelu", "element-wise", eltwise<algorithm::eltwise_relu>, ""},
    {"Elu", "element-wise", eltwise<algorithm::eltwise_elu>, ""},
    {"Sigmoid", "element-wise", eltwise<algorithm::eltwise_logistic>, ""},
    {"Tanh", "element-wise", eltwise<algorithm::eltwise_tanh>, ""},
    {"Exp", "element-wise", eltwise<algorithm::eltwise_exp>, ""},
    {"Log", "element-wise", eltwise<algorithm::eltwise_log>, ""},
    {"Abs", "element-wise", eltwise<algorithm::eltwise_abs>, ""},
    {"Sqrt", "element-wise", eltwise<algorithm::eltwise_sqrt>, ""},
    {"Mish", "element-wise", eltwise<algorithm::eltwise_mish>, ""},
    {"Gelu", "element-wise", eltwise<algorithm::eltwise_gelu_erf>, "exact or `approximate` tanh"},
    {"HardSwish", "element-wise", eltwise<algorithm::eltwise_hardswish>, ""},
    {"Clip", "element-wise", eltwise<algorithm::eltwise_clip_v2>, "bounds constant"},
    {"Erf", "element-wise", make<LoopUnary<Erf>>, ""},
    {"Neg", "element-wise", make<LoopUnary<Neg>>, ""},
    {"Reciprocal", "element-wise", make<LoopUnary<Reciprocal>>, ""},
    {"Softplus", "element-wise", make<LoopUnary<Softplus>>, ""},
    {"Softsign", "element-wise", make<LoopUnary<Softsign>>, ""},
    {"Selu", "element-wise", make<LoopUnary<Selu>>, ""},
    {"Celu", "element-wise", make<LoopUnary<Celu>>, ""},
    {"HardSigmoid", "element-wise", make<LoopUnary<HardSigmoid>>, ""},
    {"Add", "element-wise", make<Binary<AddRule>>, "numpy broadcasting, either operand"},
    {"Sub", "element-wise", make<Binary<SubRule>>, "numpy broadcasting, either operand"},
    {"Mul", "element-wise", make<Binary<MulRule>>, "numpy broadcasting, either operand"},
    {"Div", "element-wise", make<Binary<DivRule>>, "numpy broadcasting, either operand"},
    {"Pow", "element-wise", make<Binary<PowRule>>, "numpy broadcasting; the exponent's gradient where the base is positive"},
    {"Max", "element-wise", two_of<MaxRule>, "two values"},
    {"Min", "element-wise", two_of<MinRule>, "two values"},
    {"PRelu", "element-wise", make<Binary<PReluRule>>, ""},
    {"Where", "element-wise", make<WhereOp>, "the condition constant or a computed value of 0s and 1s"},
    {"Mod", "element-wise", modulo, "numpy broadcasting; fmod 0 (the divisor's sign, Python's) or 1 (the dividend's, C's)"},
    {"Equal", "element-wise", make<Binary<Predicate<std::equal_to<>>>>, kComparison},
    {"Less", "element-wise", make<Binary<Predicate<std::less<>>>>, kComparison},
    {"Greater", "element-wise", make<Binary<Predicate<std::greater<>>>>, kComparison},
    {"LessOrEqual", "element-wise", make<Binary<Predicate<std::less_equal<>>>>, kComparison},
    {"GreaterOrEqual", "element-wise", make<Binary<Predicate<std::greater_equal<>>>>, kComparison},
    {"Not", "element-wise", make<LoopUnary<Not>>, kLogic},
    {"And", "element-wise", make<Binary<Predicate<And>>>, kLogic},
    {"Or", "element-wise", make<Binary<Predicate<Or>>>, kLogic},
    {"Xor", "element-wise", make<Binary<Predicate<Xor>>>, kLogic},
    {"Sign", "element-wise", make<LoopUnary<Sign>>, kStep},
    {"Floor", "element-wise", make<LoopUnary<Floor>>, kStep},
    {"Ceil", "element-wise", make<LoopUnary<Ceil>>, kStep},
    {"Round", "element-wise", make<LoopUnary<Round>>, "halves to even; zero gradient, as PyTorch's"},
};

}  // namespace

std::span<const OperatorRecord> elementwise_operators() { return kElementwiseRecords; }

}  // namespace ddl
