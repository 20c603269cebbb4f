// The convolution and pooling family on plain layouts: Conv (any kernel, stride, dilation, group and
// padding on each side, auto_pad too) on oneDNN's convolution, MaxPool and AveragePool (any window, strides,
// pads on each side, ceil_mode) on oneDNN's pooling. These are what a piece needs where a convolution is
// among other operators (attention over its output, CBAM's shared MLP); a chain of convolutions stays ddl's
// own Conv2d layers, in oneDNN's blocked layouts.
#include <optional>

#include "core/graph/operator_registry.hpp"
#include "core/graph/tensor_walk.hpp"

namespace ddl {
namespace {

using walk::dim;

// The spatial geometry of a window operator: kernel, strides, dilations (ONNX's, 1 for none), pads on the
// left and on the right of each spatial axis, and the output's spatial dims.
struct Windows {
  dims_t kernel, strides, dilations, pad_l, pad_r, out;
};

Windows windows(const OpSpec& spec, const dims_t& x, dims_t kernel, bool ceil) {
  const std::size_t n = x.size() - 2;
  Windows w{kernel, spec.ints("strides", dims_t(n, 1)), spec.ints("dilations", dims_t(n, 1)), {}, {}, {}};
  const dims_t pads = spec.ints("pads", dims_t(2 * n, 0));
  const std::string auto_pad = spec.text("auto_pad", "NOTSET");
  if (w.kernel.size() != n || w.strides.size() != n || w.dilations.size() != n || pads.size() != 2 * n)
    spec.fail("its kernel, strides, dilations and pads do not fit " + shapes::text(x));
  for (std::size_t d = 0; d < n; ++d) {
    const dim in = x[2 + d], k = w.kernel[d], s = w.strides[d], dil = w.dilations[d];
    if (k < 1 || s < 1 || dil < 1 || pads[d] < 0 || pads[n + d] < 0 || k > (1 << 24) || s > (1 << 24) || dil > (1 << 24))
      spec.fail("its kernel, strides, dilations or pads are out of range");
    const dim span = (k - 1) * dil + 1;
    dim l = pads[d], r = pads[n + d];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const dim total = std::max<dim>(((in + s - 1) / s - 1) * s + span - in, 0);
      l = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      r = total - l;
    } else if (auto_pad == "VALID") {
      l = r = 0;
    } else if (auto_pad != "NOTSET") {
      spec.fail("its auto_pad " + auto_pad + " is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
    }
    const dim room = in + l + r - span;
    if (room < 0) spec.fail("its window is larger than its padded input " + shapes::text(x));
    dim out = (ceil ? (room + s - 1) / s : room / s) + 1;
    // ceil_mode drops a last window that would start in the right padding alone (PyTorch's rule).
    if (ceil && (out - 1) * s >= in + l) --out;
    // oneDNN wants the right padding that the output implies.
    r = (out - 1) * s + span - in - l;
    w.pad_l.push_back(l);
    w.pad_r.push_back(r);
    w.out.push_back(out);
  }
  return w;
}

// oneDNN's dilations count the gaps: ONNX's minus one.
dims_t gaps(const dims_t& dilations) {
  dims_t out;
  for (const dim d : dilations) out.push_back(d - 1);
  return out;
}

class ConvOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t &x = input(in, 0).dims, &w = input(in, 1).dims;
    const dim groups = spec_.integer("group", 1);
    if (x.size() < 3 || w.size() != x.size() || groups < 1 || x[1] != w[1] * groups || w[0] % groups != 0)
      spec_.fail("its weight " + shapes::text(w) + " in " + std::to_string(groups) + " groups does not fit " + shapes::text(x));
    if (in.size() > 2 && in[2] && product(in[2]->dims) != static_cast<std::size_t>(w[0]))
      spec_.fail("its bias does not hold one number an output channel");
    dims_t out = {x[0], w[0]};
    const Windows g = windows(spec_, x, dims_t(w.begin() + 2, w.end()), false);
    out.insert(out.end(), g.out.begin(), g.out.end());
    return out;
  }
  void setup(Context& ctx, OpInputs in, const OpValue& out, bool train) override {
    const dims_t &x = in[0]->dims, &w = in[1]->dims;
    const Windows g = windows(spec_, x, dims_t(w.begin() + 2, w.end()), false);
    const dim groups = spec_.integer("group", 1);
    src_ = walk::plain(x);
    dst_ = walk::plain(out.dims);
    // [O, I / g, k...] is [g, O / g, I / g, k...] in the same memory.
    dims_t grouped = w;
    if (groups > 1) {
      grouped[0] /= groups;
      grouped.insert(grouped.begin(), groups);
    }
    weights_ = walk::plain(grouped);
    bias_ = in.size() > 2 && in[2] ? walk::plain({w[0]}) : dnnl::memory::desc();
    const auto alg = dnnl::algorithm::convolution_direct;
    const auto prop = train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    const dims_t dil = gaps(g.dilations);
    const auto fwd = make_conv_forward_pd(ctx.engine(), prop, alg, src_, weights_, bias_, dst_, g.strides, dil, g.pad_l, g.pad_r);
    forward_ = dnnl::convolution_forward(fwd);
    if (!train) return;
    backward_data_ = dnnl::convolution_backward_data(
        make_conv_backward_data_pd(ctx.engine(), alg, src_, weights_, dst_, g.strides, dil, g.pad_l, g.pad_r, fwd));
    backward_weights_ = dnnl::convolution_backward_weights(make_conv_backward_weights_pd(
        ctx.engine(), alg, src_, weights_, bias_, dst_, g.strides, dil, g.pad_l, g.pad_r, fwd));
    weight_grad_.assign(product(w), 0.0f);
    bias_grad_.assign(w[0], 0.0f);
  }
  void forward(Context& ctx, OpInputs in, OpValue& out) override {
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, walk::over(src_, ctx, in[0]->data)},
                                                  {DNNL_ARG_WEIGHTS, walk::over(weights_, ctx, in[1]->data)},
                                                  {DNNL_ARG_DST, walk::over(dst_, ctx, out.data)}};
    if (in.size() > 2 && in[2]) args[DNNL_ARG_BIAS] = walk::over(bias_, ctx, in[2]->data);
    forward_.execute(ctx.stream(), args);
  }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) override {
    const auto gy = walk::over(dst_, ctx, out.grad);
    if (in[0]->grad) {
      backward_data_->execute(ctx.stream(), {{DNNL_ARG_DIFF_DST, gy},
                                             {DNNL_ARG_WEIGHTS, walk::over(weights_, ctx, in[1]->data)},
                                             {DNNL_ARG_DIFF_SRC, walk::over(src_, ctx, scratch)}});
      walk::add_into(in[0]->grad, scratch, product(in[0]->dims));
    }
    const bool bias = in.size() > 2 && in[2] && in[2]->grad;
    if (!in[1]->grad && !bias) return;
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, walk::over(src_, ctx, in[0]->data)},
                                                  {DNNL_ARG_DIFF_DST, gy},
                                                  {DNNL_ARG_DIFF_WEIGHTS, walk::over(weights_, ctx, weight_grad_.data())}};
    if (in.size() > 2 && in[2]) args[DNNL_ARG_DIFF_BIAS] = walk::over(bias_, ctx, bias_grad_.data());
    backward_weights_->execute(ctx.stream(), args);
    walk::add_into(in[1]->grad, weight_grad_.data(), weight_grad_.size());
    if (bias) walk::add_into(in[2]->grad, bias_grad_.data(), bias_grad_.size());
  }

 private:
  dnnl::memory::desc src_, weights_, bias_, dst_;
  dnnl::convolution_forward forward_;
  std::optional<dnnl::convolution_backward_data> backward_data_;
  std::optional<dnnl::convolution_backward_weights> backward_weights_;
  std::vector<float> weight_grad_, bias_grad_;  // oneDNN writes them; they are added to the parameters'
};

class PoolOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& x = input(in, 0).dims;
    if (x.size() < 3) spec_.fail("ddl pools [N, C, ...] of rank 3 or more, not " + shapes::text(x));
    check();
    dims_t out = {x[0], x[1]};
    const Windows g = geometry(x);
    out.insert(out.end(), g.out.begin(), g.out.end());
    return out;
  }
  void setup(Context& ctx, OpInputs in, const OpValue& out, bool train) override {
    const Windows g = geometry(in[0]->dims);
    src_ = walk::plain(in[0]->dims);
    dst_ = walk::plain(out.dims);
    const bool max = spec_.type == "MaxPool";
    const auto alg = max ? dnnl::algorithm::pooling_max
                     : spec_.integer("count_include_pad", 0) ? dnnl::algorithm::pooling_avg_include_padding
                                                              : dnnl::algorithm::pooling_avg_exclude_padding;
    const auto prop = train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    const auto fwd = make_pooling_forward_pd(ctx.engine(), prop, alg, src_, dst_, g.strides, g.kernel, g.pad_l, g.pad_r);
    forward_ = dnnl::pooling_forward(fwd);
    if (max && train) workspace_ = Tensor(fwd.workspace_desc(), ctx.engine());
    if (train)
      backward_ = dnnl::pooling_backward(
          make_pooling_backward_pd(ctx.engine(), alg, src_, dst_, g.strides, g.kernel, g.pad_l, g.pad_r, fwd));
  }
  void forward(Context& ctx, OpInputs in, OpValue& out) override {
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, walk::over(src_, ctx, in[0]->data)},
                                                  {DNNL_ARG_DST, walk::over(dst_, ctx, out.data)}};
    if (!workspace_.empty()) args[DNNL_ARG_WORKSPACE] = workspace_.memory();
    forward_.execute(ctx.stream(), args);
  }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) override {
    if (!in[0]->grad) return;
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_DIFF_DST, walk::over(dst_, ctx, out.grad)},
                                                  {DNNL_ARG_DIFF_SRC, walk::over(src_, ctx, scratch)}};
    if (!workspace_.empty()) args[DNNL_ARG_WORKSPACE] = workspace_.memory();
    backward_->execute(ctx.stream(), args);
    walk::add_into(in[0]->grad, scratch, product(in[0]->dims));
  }

 private:
  void check() const {
    for (const dim d : spec_.ints("dilations", {}))
      if (d != 1) spec_.fail("ddl pools without dilations");
    // PyTorch counts padding past the input, which a ceil_mode window reaches, differently from oneDNN.
    if (spec_.type == "AveragePool" && spec_.integer("ceil_mode", 0) && spec_.integer("count_include_pad", 0))
      spec_.fail("ddl takes an average with ceil_mode that does not count padding only");
  }
  Windows geometry(const dims_t& x) const {
    return windows(spec_, x, spec_.ints("kernel_shape", {}), spec_.integer("ceil_mode", 0) != 0);
  }
  dnnl::memory::desc src_, dst_;
  dnnl::pooling_forward forward_;
  std::optional<dnnl::pooling_backward> backward_;
  Tensor workspace_;
};

const OperatorRecord kConvolutionRecords[] = {
    {"Conv", "convolution and pooling", make<ConvOp>, "any kernel, strides, dilations, groups, pads on each side, auto_pad"},
    {"MaxPool", "convolution and pooling", make<PoolOp>, "any window, strides, pads on each side, ceil_mode; no dilations"},
    {"AveragePool", "convolution and pooling", make<PoolOp>,
     "any window, strides, pads on each side, ceil_mode (not counting padding), count_include_pad"},
};

}  // namespace

std::span<const OperatorRecord> convolution_operators() { return kConvolutionRecords; }

}  // namespace ddl
