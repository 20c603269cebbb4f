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
    outer_ = inner_ = 1;
    for (dim d = 0; d < axis; ++d) outer_ *= out.dims[d];
    for (std::size_t d = axis + 1; d < out.dims.size(); ++d) inner_ *= out.dims[d];
    length_ = out.dims[axis];
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    each_line(in[0]->data, out.data, [&](const float* x, float* y) {
      float m = -std::numeric_limits<float>::infinity(), sum = 0.0f;
      for (dim k = 0; k < length_; ++k) m = std::max(m, x[k * inner_]);
      for (dim k = 0; k < length_; ++k) sum += std::exp(x[k * inner_] - m);
      const float shift = m + std::log(sum);
      for (dim k = 0; k < length_; ++k) y[k * inner_] = x[k * inner_] - shift;
    });
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    if (!in[0]->grad) return;
    const float* gy = out.grad;
    each_line(out.data, in[0]->grad, [&](const float* y, float* gx) {
      const std::ptrdiff_t at = y - out.data;
      float sum = 0.0f;
      for (dim k = 0; k < length_; ++k) sum += gy[at + k * inner_];
      for (dim k = 0; k < length_; ++k) gx[k * inner_] += gy[at + k * inner_] - std::exp(y[k * inner_]) * sum;
    });
  }

 private:
  // fn(from, to) at the start of each line along the axis.
  template <class F>
  void each_line(const float* from, float* to, F&& fn) const {
#pragma omp parallel for collapse(2) if (outer_ * inner_ * length_ >= static_cast<dim>(walk::kParallelFrom))
    for (dim o = 0; o < outer_; ++o)
      for (dim i = 0; i < inner_; ++i) fn(from + o * length_ * inner_ + i, to + o * length_ * inner_ + i);
  }
  dim outer_ = 1, inner_ = 1, length_ = 1;
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
    outer_ = inner_ = 1;
    for (dim d = 0; d < a; ++d) outer_ *= out.dims[d];
    for (std::size_t d = a + 1; d < out.dims.size(); ++d) inner_ *= out.dims[d];
    length_ = out.dims[a];
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
    const dim length = length_, inner = inner_;
    const bool exclusive = exclusive_;
#pragma omp parallel for collapse(2) if (outer_ * inner_ * length_ >= static_cast<dim>(walk::kParallelFrom))
    for (dim o = 0; o < outer_; ++o)
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
  dim outer_ = 1, inner_ = 1, length_ = 1;
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
    outer_ = inner_ = 1;
    for (dim d = 0; d < a; ++d) outer_ *= x[d];
    for (std::size_t d = a + 1; d < x.size(); ++d) inner_ *= x[d];
    length_ = x[a];
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const bool largest = spec_.type == "ArgMax", last = spec_.integer("select_last_index", 0) != 0;
    const float* x = in[0]->data;
    for (dim o = 0; o < outer_; ++o)
      for (dim i = 0; i < inner_; ++i) {
        dim best = 0;
        for (dim s = 1; s < length_; ++s) {
          const float v = x[(o * length_ + s) * inner_ + i], b = x[(o * length_ + best) * inner_ + i];
          if ((largest ? v > b : v < b) || (last && v == b)) best = s;
        }
        out.data[o * inner_ + i] = static_cast<float>(best);
      }
  }
  void backward(Context&, OpInputs, const OpValue&, float*) override {}

 private:
  dim outer_ = 1, inner_ = 1, length_ = 1;
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
