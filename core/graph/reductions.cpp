// The reductions family: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceL2, ReduceSumSquare and
// ReduceLogSumExp over any axes, keeping them or not; Softmax (oneDNN's) and LogSoftmax along any axis; CumSum,
// the running sums along an axis.
#include <cmath>
#include <limits>
#include <optional>

#include "core/graph/operator_registry.hpp"
#include "core/graph/tensor_walk.hpp"

namespace ddl {
namespace {

using walk::dim;

// A tensor as the loops along one axis see it: the elements before the axis (outer), along it, and after it
// (inner, the stride along it).
struct Lines {
  dim outer = 1, length = 1, inner = 1;
};
Lines lines_along(const dims_t& dims, dim axis) {
  Lines lines;
  for (dim d = 0; d < axis; ++d) lines.outer *= dims[d];
  for (std::size_t d = axis + 1; d < dims.size(); ++d) lines.inner *= dims[d];
  lines.length = dims[axis];
  return lines;
}

class Reduce : public Operator {
 public:
  // GlobalAveragePool and GlobalMaxPool are the mean and the maximum over the axes after [N, C], kept.
  explicit Reduce(OpSpec spec) : Operator(std::move(spec)) {
    global_ = spec_.type.starts_with("Global");
    what_ = spec_.type == "GlobalAveragePool" ? "ReduceMean" : spec_.type == "GlobalMaxPool" ? "ReduceMax" : spec_.type;
  }
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    return shapes::reduce(input(in, 0).dims, axes(in), global_ || spec_.integer("keepdims", 1) != 0);
  }
  void setup(Context&, OpInputs in, const OpValue&, bool) override {
    kept_ = shapes::reduce(in[0]->dims, axes(in), true);
    to_kept_ = shapes::broadcast_strides(kept_, in[0]->dims);
    count_ = static_cast<float>(product(in[0]->dims)) / static_cast<float>(std::max<std::size_t>(product(kept_), 1));
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const std::string& t = what_;
    const float* x = in[0]->data;
    float* y = out.data;
    const std::size_t n = product(kept_);
    const dims_t none(in[0]->dims.size(), 0);
    const auto each = [&](auto&& fn) { walk::each(in[0]->dims, to_kept_, none, fn); };
    if (t == "ReduceMax" || t == "ReduceMin" || t == "ReduceLogSumExp") {
      const bool max = t != "ReduceMin";
      std::fill(y, y + n, (max ? -1 : 1) * std::numeric_limits<float>::infinity());
      each([&](std::size_t o, dim i, dim) { y[i] = max ? std::max(y[i], x[o]) : std::min(y[i], x[o]); });
      if (t != "ReduceLogSumExp") return;
      std::vector<float> sums(n, 0.0f);
      each([&](std::size_t o, dim i, dim) { sums[i] += std::exp(x[o] - y[i]); });
      for (std::size_t i = 0; i < n; ++i) y[i] += std::log(sums[i]);
      return;
    }
    std::fill(y, y + n, 0.0f);
    const bool square = t == "ReduceSumSquare" || t == "ReduceL2";
    each([&](std::size_t o, dim i, dim) { y[i] += square ? x[o] * x[o] : x[o]; });
    if (t == "ReduceMean")
      for (std::size_t i = 0; i < n; ++i) y[i] /= count_;
    if (t == "ReduceL2")
      for (std::size_t i = 0; i < n; ++i) y[i] = std::sqrt(y[i]);
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    float* gx = in[0]->grad;
    if (!gx) return;
    const std::string& t = what_;
    const float *x = in[0]->data, *y = out.data, *gy = out.grad;
    const float n = count_;
    // The slope of y[i] in x[o]. Max and Min pass the gradient to every element equal to the result.
    const auto slope = [&](std::size_t o, dim i) -> float {
      if (t == "ReduceSum") return 1.0f;
      if (t == "ReduceMean") return 1.0f / n;
      if (t == "ReduceSumSquare") return 2.0f * x[o];
      if (t == "ReduceL2") return y[i] > 0.0f ? x[o] / y[i] : 0.0f;
      if (t == "ReduceLogSumExp") return std::exp(x[o] - y[i]);
      return x[o] == y[i] ? 1.0f : 0.0f;
    };
    walk::in_parallel(in[0]->dims, to_kept_, dims_t(in[0]->dims.size(), 0),
                      [&](std::size_t o, dim i, dim) { gx[o] += gy[i] * slope(o, i); });
  }
  // A sum's and a mean's slopes are constants.
  bool backward_reads_input(std::size_t, const std::vector<bool>&) const override { return !linear(); }
  bool backward_reads_output(const std::vector<bool>&) const override { return !linear(); }

 private:
  // The axes: an input from opset 13 (ReduceSum) or 18 (the others), an attribute before; all where none
  // are given, unless noop_with_empty_axes.
  std::vector<std::int64_t> axes(OpInputs in) const {
    if (global_) {
      if (input(in, 0).dims.size() < 3) spec_.fail("ddl pools [N, C, ...] of rank 3 or more");
      std::vector<std::int64_t> spatial;
      for (std::size_t d = 2; d < in[0]->dims.size(); ++d) spatial.push_back(static_cast<std::int64_t>(d));
      return spatial;
    }
    auto axes = spec_.integer_input(1) ? *spec_.integer_input(1) : spec_.ints("axes", {});
    if (axes.empty() && spec_.integer("noop_with_empty_axes", 0) != 0) spec_.fail("ddl reduces over some axes");
    if (axes.empty())
      for (std::size_t d = 0; d < input(in, 0).dims.size(); ++d) axes.push_back(static_cast<std::int64_t>(d));
    return axes;
  }
  bool global_ = false;
  bool linear() const { return what_ == "ReduceSum" || what_ == "ReduceMean"; }
  std::string what_;  // the reduction it computes
  dims_t kept_, to_kept_;
  float count_ = 1;
};

// Softmax along an axis, on oneDNN's softmax.
class SoftmaxOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& x = input(in, 0).dims;
    shapes::axis_in(spec_.integer("axis", -1), x.size());
    return x;
  }
  void setup(Context& ctx, OpInputs, const OpValue& out, bool train) override {
    md_ = walk::plain(out.dims);
    const int axis = static_cast<int>(shapes::axis_in(spec_.integer("axis", -1), out.dims.size()));
    const auto fwd = make_softmax_forward_pd(
        ctx.engine(), train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, md_, axis);
    forward_ = dnnl::softmax_forward(fwd);
    if (train) backward_ = dnnl::softmax_backward(make_softmax_backward_pd(ctx.engine(), md_, md_, axis, fwd));
  }
  void forward(Context& ctx, OpInputs in, OpValue& out) override {
    forward_.execute(ctx.stream(), {{DNNL_ARG_SRC, walk::over(md_, ctx, in[0]->data)}, {DNNL_ARG_DST, walk::over(md_, ctx, out.data)}});
  }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) override {
    if (!in[0]->grad) return;
    backward_->execute(ctx.stream(), {{DNNL_ARG_DST, walk::over(md_, ctx, out.data)},
                                      {DNNL_ARG_DIFF_DST, walk::over(md_, ctx, out.grad)},
                                      {DNNL_ARG_DIFF_SRC, walk::over(md_, ctx, scratch)}});
    walk::add_into(in[0]->grad, scratch, product(out.dims));
  }
  bool backward_reads_input(std::size_t, const std::vector<bool>&) const override { return false; }
  bool backward_reads_output(const std::vector<bool>&) const override { return true; }

 private:
  dnnl::memory::desc md_;
  dnnl::softmax_forward forward_;
  std::optional<dnnl::softmax_backward> backward_;
};

// LogSoftmax along an axis: x - max - log(sum(exp(x - max))), by loops over [outer, axis, inner].
class LogSoftmaxOp : public SoftmaxOp {
 public:
  using SoftmaxOp::SoftmaxOp;
  void setup(Context&, OpInputs, const OpValue& out, bool) override {
    const dim axis = shapes::axis_in(spec_.integer("axis", -1), out.dims.size());
    lines_ = lines_along(out.dims, axis);
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    each_line(in[0]->data, out.data, [&](const float* x, float* y) {
      float m = -std::numeric_limits<float>::infinity(), sum = 0.0f;
      for (dim k = 0; k < lines_.length; ++k) m = std::max(m, x[k * lines_.inner]);
      for (dim k = 0; k < lines_.length; ++k) sum += std::exp(x[k * lines_.inner] - m);
      const float shift = m + std::log(sum);
      for (dim k = 0; k < lines_.length; ++k) y[k * lines_.inner] = x[k * lines_.inner] - shift;
    });
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    if (!in[0]->grad) return;
    const float* gy = out.grad;
    each_line(out.data, in[0]->grad, [&](const float* y, float* gx) {
      const std::ptrdiff_t at = y - out.data;
      float sum = 0.0f;
      for (dim k = 0; k < lines_.length; ++k) sum += gy[at + k * lines_.inner];
      for (dim k = 0; k < lines_.length; ++k) gx[k * lines_.inner] += gy[at + k * lines_.inner] - std::exp(y[k * lines_.inner]) * sum;
    });
  }

 private:
  // fn(from, to) at the start of each line along the axis.
  template <class F>
  void each_line(const float* from, float* to, F&& fn) const {
#pragma omp parallel for collapse(2) if (lines_.outer * lines_.inner * lines_.length >= static_cast<dim>(walk::kParallelFrom))
    for (dim o = 0; o < lines_.outer; ++o)
      for (dim i = 0; i < lines_.inner; ++i) fn(from + o * lines_.length * lines_.inner + i, to + o * lines_.length * lines_.inner + i);
  }
  Lines lines_;
};

// CumSum along an axis (an integer known before the graph runs), inclusive or exclusive (each sum without
// its own element), from the front or reversed (from the back). The gradient is the output gradient's
// running sums the other way, with the same exclusive. Sums in double, as PyTorch's CPU cumsum.
class CumSumOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& x = input(in, 0).dims;
    axis(in, x);
    return x;
  }
  void setup(Context&, OpInputs in, const OpValue& out, bool) override {
    const dim a = axis(in, out.dims);
    lines_ = lines_along(out.dims, a);
    exclusive_ = spec_.integer("exclusive", 0) != 0;
    reverse_ = spec_.integer("reverse", 0) != 0;
  }
  void forward(Context&, OpInputs in, OpValue& out) override { scan(in[0]->data, out.data, reverse_, false); }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    if (in[0]->grad) scan(out.grad, in[0]->grad, !reverse_, true);
  }

 private:
  dim axis(OpInputs in, const dims_t& x) const {
    const auto* given = spec_.integer_input(1);
    if ((in.size() > 1 && in[1]) || !given || given->size() != 1)
      spec_.fail("its axis is not one integer known before the graph runs");
    return shapes::axis_in(given->front(), x.size());
  }
  // The running sums of `from` along the axis, written to `to` or, where `add`, added to it.
  void scan(const float* from, float* to, bool reverse, bool add) const {
    const dim length = lines_.length, inner = lines_.inner;
    const bool exclusive = exclusive_;
#pragma omp parallel for collapse(2) if (lines_.outer * lines_.inner * lines_.length >= static_cast<dim>(walk::kParallelFrom))
    for (dim o = 0; o < lines_.outer; ++o)
      for (dim i = 0; i < inner; ++i) {
        double sum = 0;
        for (dim s = 0; s < length; ++s) {
          const dim at = (o * length + (reverse ? length - 1 - s : s)) * inner + i;
          const double before = sum;
          sum += from[at];
          const float value = static_cast<float>(exclusive ? before : sum);
          to[at] = add ? to[at] + value : value;
        }
      }
  }
  Lines lines_;
  bool exclusive_ = false, reverse_ = false;
};

// ArgMax and ArgMin along an axis (keepdims, select_last_index): the index as a float, as ONNX's int64 is the
// graph's float here. An index is no function of the values a gradient could flow through: backward adds
// nothing.
class ArgOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    dims_t out = input(in, 0).dims;
    const auto a = static_cast<std::size_t>(shapes::axis_in(spec_.integer("axis", 0), out.size()));
    if (spec_.integer("keepdims", 1))
      out[a] = 1;
    else
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(a));
    return out;
  }
  void setup(Context&, OpInputs in, const OpValue&, bool) override {
    const dims_t& x = in[0]->dims;
    const dim a = shapes::axis_in(spec_.integer("axis", 0), x.size());
    lines_ = lines_along(x, a);
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const bool largest = spec_.type == "ArgMax", last = spec_.integer("select_last_index", 0) != 0;
    const float* x = in[0]->data;
    for (dim o = 0; o < lines_.outer; ++o)
      for (dim i = 0; i < lines_.inner; ++i) {
        dim best = 0;
        for (dim s = 1; s < lines_.length; ++s) {
          const float v = x[(o * lines_.length + s) * lines_.inner + i], b = x[(o * lines_.length + best) * lines_.inner + i];
          if ((largest ? v > b : v < b) || (last && v == b)) best = s;
        }
        out.data[o * lines_.inner + i] = static_cast<float>(best);
      }
  }
  void backward(Context&, OpInputs, const OpValue&, float*) override {}

 private:
  Lines lines_;
};

const OperatorRecord kReductionsRecords[] = {
    {"ReduceSum", "reductions", make<Reduce>, "axes known before the graph runs"},
    {"ReduceMean", "reductions", make<Reduce>, "axes known before the graph runs"},
    {"ReduceMax", "reductions", make<Reduce>, "the gradient to every element equal to the maximum"},
    {"ReduceMin", "reductions", make<Reduce>, "the gradient to every element equal to the minimum"},
    {"ReduceL2", "reductions", make<Reduce>, ""},
    {"ReduceSumSquare", "reductions", make<Reduce>, ""},
    {"ReduceLogSumExp", "reductions", make<Reduce>, ""},
    {"GlobalAveragePool", "reductions", make<Reduce>, ""},
    {"GlobalMaxPool", "reductions", make<Reduce>, ""},
    {"Softmax", "reductions", make<SoftmaxOp>, "any axis"},
    {"LogSoftmax", "reductions", make<LogSoftmaxOp>, "any axis"},
    {"CumSum", "reductions", make<CumSumOp>, "axis known before the graph runs; exclusive and reverse"},
    {"ArgMax", "reductions", make<ArgOp>, "the index as a float; no gradient"},
    {"ArgMin", "reductions", make<ArgOp>, "the index as a float; no gradient"},
};

}  // namespace

std::span<const OperatorRecord> reduction_operators() { return kReductionsRecords; }

}  // namespace ddl
