// The convolution and pooling family on plain layouts: Conv (any kernel, stride, dilation, group and
// padding on each side, auto_pad too) on oneDNN's convolution, ConvTranspose (the same, with output_padding
// and output_shape) on oneDNN's deconvolution, MaxPool and AveragePool (any window, strides, pads on each
// side, ceil_mode) on oneDNN's pooling. These are what a piece needs where a convolution is among other
// operators (attention over its output, CBAM's shared MLP, a decoder's upsampling); a chain of convolutions
// stays ddl's own Conv2d layers, in oneDNN's blocked layouts.
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

// What a convolution and its transpose run on, once set up: their memory descriptors and oneDNN's forward,
// backward-data and backward-weights primitives (Forward, BackwardData, BackwardWeights: the
// convolution's or the deconvolution's). Input 1 is the weight and input 2 the bias, where given; their
// gradients are written by oneDNN here, then added to the parameters'.
template <class Forward, class BackwardData, class BackwardWeights>
struct WeightedWindows {
  dnnl::memory::desc src, weights, bias, dst;
  Forward forward_pass;
  std::optional<BackwardData> backward_data;
  std::optional<BackwardWeights> backward_weights;
  std::vector<float> weight_grad, bias_grad;

  void forward(Context& ctx, OpInputs in, OpValue& out) const {
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, walk::over(src, ctx, in[0]->data)},
                                                  {DNNL_ARG_WEIGHTS, walk::over(weights, ctx, in[1]->data)},
                                                  {DNNL_ARG_DST, walk::over(dst, ctx, out.data)}};
    if (in.size() > 2 && in[2]) args[DNNL_ARG_BIAS] = walk::over(bias, ctx, in[2]->data);
    forward_pass.execute(ctx.stream(), args);
  }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) {
    const auto gy = walk::over(dst, ctx, out.grad);
    if (in[0]->grad) {
      backward_data->execute(ctx.stream(), {{DNNL_ARG_DIFF_DST, gy},
                                            {DNNL_ARG_WEIGHTS, walk::over(weights, ctx, in[1]->data)},
                                            {DNNL_ARG_DIFF_SRC, walk::over(src, ctx, scratch)}});
      walk::add_into(in[0]->grad, scratch, product(in[0]->dims));
    }
    const bool with_bias = in.size() > 2 && in[2] && in[2]->grad;
    if (!in[1]->grad && !with_bias) return;
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, walk::over(src, ctx, in[0]->data)},
        {DNNL_ARG_DIFF_DST, gy},
        {DNNL_ARG_DIFF_WEIGHTS, walk::over(weights, ctx, weight_grad.data())}};
    if (in.size() > 2 && in[2]) args[DNNL_ARG_DIFF_BIAS] = walk::over(bias, ctx, bias_grad.data());
    backward_weights->execute(ctx.stream(), args);
    walk::add_into(in[1]->grad, weight_grad.data(), weight_grad.size());
    if (with_bias) walk::add_into(in[2]->grad, bias_grad.data(), bias_grad.size());
  }
};

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
    auto& p = primitives_;
    const Windows g = windows(spec_, x, dims_t(w.begin() + 2, w.end()), false);
    const dim groups = spec_.integer("group", 1);
    p.src = walk::plain(x);
    p.dst = walk::plain(out.dims);
    // [O, I / g, k...] is [g, O / g, I / g, k...] in the same memory.
    dims_t grouped = w;
    if (groups > 1) {
      grouped[0] /= groups;
      grouped.insert(grouped.begin(), groups);
    }
    p.weights = walk::plain(grouped);
    p.bias = in.size() > 2 && in[2] ? walk::plain({w[0]}) : dnnl::memory::desc();
    const auto alg = dnnl::algorithm::convolution_direct;
    const auto prop = train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    const dims_t dil = gaps(g.dilations);
    const auto fwd = make_conv_forward_pd(ctx.engine(), prop, alg, p.src, p.weights, p.bias, p.dst, g.strides, dil,
                                          g.pad_l, g.pad_r);
    p.forward_pass = dnnl::convolution_forward(fwd);
    if (!train) return;
    p.backward_data = dnnl::convolution_backward_data(
        make_conv_backward_data_pd(ctx.engine(), alg, p.src, p.weights, p.dst, g.strides, dil, g.pad_l, g.pad_r, fwd));
    p.backward_weights = dnnl::convolution_backward_weights(make_conv_backward_weights_pd(
        ctx.engine(), alg, p.src, p.weights, p.bias, p.dst, g.strides, dil, g.pad_l, g.pad_r, fwd));
    p.weight_grad.assign(product(w), 0.0f);
    p.bias_grad.assign(w[0], 0.0f);
  }
  void forward(Context& ctx, OpInputs in, OpValue& out) override { primitives_.forward(ctx, in, out); }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) override {
    primitives_.backward(ctx, in, out, scratch);
  }

 private:
  WeightedWindows<dnnl::convolution_forward, dnnl::convolution_backward_data, dnnl::convolution_backward_weights>
      primitives_;
};

// ConvTranspose's geometry, ONNX's rules: each output dim is stride * (in - 1) + output_padding + span -
// pad_begin - pad_end, or output_shape (auto_pad SAME_*: in * stride) with the pads that give it, the odd
// one at the end for SAME_UPPER and at the beginning otherwise. oneDNN's deconvolution has no
// output_padding but takes the output's dims as given, so `pad_r` is ONNX's end pad less the output_padding
// (rows past every window's reach), which oneDNN takes down to 1 - stride; ONNX allows more (PyTorch's
// output_padding below the dilation), which is refused.
Windows transposed_windows(const OpSpec& spec, const dims_t& x, const dims_t& w) {
  const std::size_t n = x.size() - 2;
  const dims_t kernel(w.begin() + 2, w.end());
  Windows g{kernel, spec.ints("strides", dims_t(n, 1)), spec.ints("dilations", dims_t(n, 1)), {}, {}, {}};
  const std::string auto_pad = spec.text("auto_pad", "NOTSET");
  const bool given_pads = spec.attributes.count("pads") > 0 || auto_pad == "VALID";  // VALID's are 0
  const dims_t pads = spec.ints("pads", dims_t(2 * n, 0)), extra = spec.ints("output_padding", dims_t(n, 0));
  const dims_t shape = spec.ints("output_shape", {});  // the spatial dims, or [N, C, spatial...]
  if (spec.ints("kernel_shape", kernel) != kernel) spec.fail("its kernel_shape is not its weight's " + shapes::text(w));
  if (g.strides.size() != n || g.dilations.size() != n || pads.size() != 2 * n || extra.size() != n ||
      (!shape.empty() && shape.size() != n && shape.size() != n + 2))
    spec.fail("its strides, dilations, pads, output_padding or output_shape do not fit " + shapes::text(x));
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (!same && auto_pad != "NOTSET" && auto_pad != "VALID")
    spec.fail("its auto_pad " + auto_pad + " is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  constexpr dim kLargest = 1 << 24;
  for (std::size_t d = 0; d < n; ++d) {
    const dim in = x[2 + d], k = kernel[d], s = g.strides[d], dil = g.dilations[d], op = extra[d];
    if (in < 1 || in > (dim{1} << 31) || k < 1 || s < 1 || dil < 1 || op < 0 || pads[d] < 0 || pads[n + d] < 0 ||
        k > kLargest || s > kLargest || dil > kLargest || op > kLargest || pads[d] > kLargest || pads[n + d] > kLargest)
      spec.fail("its input, kernel, strides, dilations, pads or output_padding are out of range");
    const dim full = s * (in - 1) + op + (k - 1) * dil + 1;  // the output before the pads are taken off
    dim l = auto_pad == "VALID" ? 0 : pads[d], r = auto_pad == "VALID" ? 0 : pads[n + d];
    if (same || !shape.empty()) {
      const dim target = shape.empty() ? in * s : shape[shape.size() - n + d];
      if (target < 1 || target > (dim{1} << 40)) spec.fail("its output_shape is out of range");
      if (same || !given_pads) {
        // Halves floored, as ONNX's reference implementation does: a negative total (an output past the
        // windows' reach) is a negative pad.
        const dim total = full - target, half = total >= 0 ? total / 2 : -((1 - total) / 2);
        l = auto_pad == "SAME_UPPER" ? half : total - half;
        r = total - l;
      } else if (full - l - r != target) {
        spec.fail("its output_shape " + shapes::text(shape) + " disagrees with its pads");
      }
    }
    if (full - l - r < 1) spec.fail("its pads leave no output of " + shapes::text(x));
    if (l < 0) spec.fail("its output_shape or auto_pad asks for a negative begin pad, which oneDNN cannot take");
    if (r - op + s <= 0)
      spec.fail("its output_padding " + std::to_string(op) + " is not below its stride plus its end pad (oneDNN's)");
    g.pad_l.push_back(l);
    g.pad_r.push_back(r - op);
    g.out.push_back(full - l - r);
  }
  return g;
}

// ONNX's weight [C_in, C_out / g, k...] is oneDNN's deconvolution weight [C_out, C_in, k...] (in groups
// [g, C_out / g, C_in / g, k...]) in the same memory, its two channel axes read with each other's strides.
dnnl::memory::desc transposed_weights(const dims_t& w, dim groups) {
  dims_t dims = w;
  if (groups > 1) {
    dims[0] /= groups;
    dims.insert(dims.begin(), groups);
  }
  dims_t strides = shapes::strides_of(dims);
  const std::size_t c = groups > 1 ? 1 : 0;
  std::swap(dims[c], dims[c + 1]);
  std::swap(strides[c], strides[c + 1]);
  return walk::strided(dims, strides);
}

class ConvTransposeOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t &x = input(in, 0).dims, &w = input(in, 1).dims;
    const dim groups = spec_.integer("group", 1);
    // oneDNN's deconvolution has 1, 2 or 3 spatial axes.
    if (x.size() < 3 || x.size() > 5 || w.size() != x.size() || groups < 1 || groups > w[0] || x[1] != w[0] ||
        w[0] % groups != 0)
      spec_.fail("its weight " + shapes::text(w) + " in " + std::to_string(groups) + " groups does not fit " +
                 shapes::text(x));
    if (in.size() > 2 && in[2] && product(in[2]->dims) != static_cast<std::size_t>(w[1] * groups))
      spec_.fail("its bias does not hold one number an output channel");
    dims_t out = {x[0], w[1] * groups};
    const Windows g = transposed_windows(spec_, x, w);
    out.insert(out.end(), g.out.begin(), g.out.end());
    return out;
  }
  void setup(Context& ctx, OpInputs in, const OpValue& out, bool train) override {
    const dims_t &x = in[0]->dims, &w = in[1]->dims;
    auto& p = primitives_;
    const Windows g = transposed_windows(spec_, x, w);
    p.src = walk::plain(x);
    p.dst = walk::plain(out.dims);
    p.weights = transposed_weights(w, spec_.integer("group", 1));
    p.bias = in.size() > 2 && in[2] ? walk::plain({out.dims[1]}) : dnnl::memory::desc();
    const auto alg = dnnl::algorithm::deconvolution_direct;
    const auto prop = train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    const dims_t dil = gaps(g.dilations);
    const auto fwd = make_deconv_forward_pd(ctx.engine(), prop, alg, p.src, p.weights, p.bias, p.dst, g.strides, dil,
                                            g.pad_l, g.pad_r);
    p.forward_pass = dnnl::deconvolution_forward(fwd);
    if (!train) return;
    p.backward_data = dnnl::deconvolution_backward_data(make_deconv_backward_data_pd(
        ctx.engine(), alg, p.src, p.weights, p.dst, g.strides, dil, g.pad_l, g.pad_r, fwd));
    p.backward_weights = dnnl::deconvolution_backward_weights(make_deconv_backward_weights_pd(
        ctx.engine(), alg, p.src, p.weights, p.bias, p.dst, g.strides, dil, g.pad_l, g.pad_r, fwd));
    p.weight_grad.assign(product(w), 0.0f);
    p.bias_grad.assign(out.dims[1], 0.0f);
  }
  void forward(Context& ctx, OpInputs in, OpValue& out) override { primitives_.forward(ctx, in, out); }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) override {
    primitives_.backward(ctx, in, out, scratch);
  }

 private:
  WeightedWindows<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data, dnnl::deconvolution_backward_weights>
      primitives_;
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
    {"ConvTranspose", "convolution and pooling", make<ConvTransposeOp>,
     "1 to 3 spatial axes; any kernel, strides, dilations, groups, pads on each side, output_shape, auto_pad; "
     "output_padding below the stride plus the end pad"},
    {"MaxPool", "convolution and pooling", make<PoolOp>, "any window, strides, pads on each side, ceil_mode; no dilations"},
    {"AveragePool", "convolution and pooling", make<PoolOp>,
     "any window, strides, pads on each side, ceil_mode (not counting padding), count_include_pad"},
};

}  // namespace

std::span<const OperatorRecord> convolution_operators() { return kConvolutionRecords; }

}  // namespace ddl
