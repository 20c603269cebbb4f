#include "models/onnx/value_shapes.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

namespace ddl::onnx {
namespace {

std::optional<Dims> broadcast(const Dims& a, const Dims& b) {
  Dims out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1, y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

std::optional<std::int64_t> axis_in(std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) return std::nullopt;
  return axis < 0 ? axis + r : axis;
}

// A corrupt file's numbers can be anything: every product and sum here is checked, and a result that
// overflows, or a negative dimension, leaves the dims unknown (nullopt) for the builder to refuse.
std::optional<std::int64_t> count(const Dims& dims) {
  std::int64_t n = 1;
  for (const std::int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

// A window's output size: convolution and pooling, floor or ceiling.
std::optional<std::int64_t> windows(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
                                    std::int64_t pads, bool ceil) {
  if (kernel < 1 || stride < 1 || dilation < 1 || pads < 0) return std::nullopt;
  const __int128 span = static_cast<__int128>(in) + pads - static_cast<__int128>(dilation) * (kernel - 1) - 1;
  if (span < 0) return 0;
  const __int128 out = (ceil ? (span + stride - 1) / stride : span / stride) + 1;
  if (out > std::numeric_limits<std::int64_t>::max()) return std::nullopt;
  return static_cast<std::int64_t>(out);
}

}  // namespace

std::optional<Dims> output_dims(const Node& node, const std::vector<std::optional<Dims>>& dims,
                                const std::vector<const Constant*>& values) {
  const auto has = [&](std::size_t i) { return i < dims.size() && dims[i].has_value(); };
  if (!has(0)) return std::nullopt;
  const Dims& x = *dims[0];
  const auto ints = [&](std::size_t i) -> const Dims* {
    return i < values.size() && values[i] && values[i]->integer ? &values[i]->ints : nullptr;
  };
  const std::string& op = node.op;
  static const std::set<std::string> same = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish",
                                             "Erf", "Sqrt", "Softmax", "LogSoftmax", "Identity", "Gelu", "Cast", "Neg",
                                             "Exp", "Abs", "Reciprocal", "BatchNormalization", "LayerNormalization",
                                             "Dropout"};
  if (same.count(op)) return x;
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Equal") {
    if (!has(1)) return std::nullopt;
    return broadcast(x, *dims[1]);
  }
  if (op == "Where") {
    if (!has(1) || !has(2)) return std::nullopt;
    const auto two = broadcast(x, *dims[1]);
    return two ? broadcast(*two, *dims[2]) : std::nullopt;
  }
  if (op == "MatMul") {
    if (!has(1) || x.size() < 2 || dims[1]->size() < 2) return std::nullopt;
    const Dims& y = *dims[1];
    if (x.back() != y[y.size() - 2]) return std::nullopt;
    auto out = broadcast(Dims(x.begin(), x.end() - 2), Dims(y.begin(), y.end() - 2));
    if (!out) return std::nullopt;
    out->push_back(x[x.size() - 2]);
    out->push_back(y.back());
    return out;
  }
  if (op == "Gemm") {
    if (!has(1) || x.size() != 2 || dims[1]->size() != 2) return std::nullopt;
    const Dims& y = *dims[1];
    const bool ta = node.integer("transA", 0) != 0, tb = node.integer("transB", 0) != 0;
    return Dims{ta ? x[1] : x[0], tb ? y[0] : y[1]};
  }
  if (op == "Transpose") {
    Dims perm = node.integers("perm", {});
    if (perm.empty())
      for (std::size_t d = x.size(); d-- > 0;) perm.push_back(static_cast<std::int64_t>(d));
    if (perm.size() != x.size()) return std::nullopt;
    Dims out;
    for (const std::int64_t p : perm) {
      if (p < 0 || p >= static_cast<std::int64_t>(x.size())) return std::nullopt;
      out.push_back(x[p]);
    }
    return out;
  }
  if (op == "Reshape") {
    const Dims* shape = ints(1);
    if (!shape) return std::nullopt;
    Dims out;
    std::int64_t known = 1, free = -1;
    for (std::size_t i = 0; i < shape->size(); ++i) {
      std::int64_t d = (*shape)[i];
      if (d == 0 && node.integer("allowzero", 0) == 0) d = i < x.size() ? x[i] : -3;
      if (d == -1 && free < 0)
        free = static_cast<std::int64_t>(i);
      else if (d < 0 || __builtin_mul_overflow(known, d, &known))
        return std::nullopt;
      out.push_back(d);
    }
    const auto all = count(x);
    if (!all) return std::nullopt;
    if (free >= 0) {
      if (known == 0 || *all % known != 0) return std::nullopt;
      out[free] = *all / known;
    }
    if (count(out) != all) return std::nullopt;
    return out;
  }
  if (op == "Flatten") {
    const auto axis = node.integer("axis", 1);
    if (axis < 0 || axis > static_cast<std::int64_t>(x.size())) return std::nullopt;
    const auto outer = count(Dims(x.begin(), x.begin() + axis)), inner = count(Dims(x.begin() + axis, x.end()));
    if (!outer || !inner) return std::nullopt;
    return Dims{*outer, *inner};
  }
  if (op == "Concat") {
    const auto axis = axis_in(node.integer("axis", 0), x.size());
    if (!axis) return std::nullopt;
    Dims out = x;
    for (std::size_t i = 1; i < dims.size(); ++i) {
      if (!has(i) || dims[i]->size() != x.size() || __builtin_add_overflow(out[*axis], (*dims[i])[*axis], &out[*axis]))
        return std::nullopt;
    }
    return out;
  }
  if (op == "Slice") {
    const Dims *starts = ints(1), *ends = ints(2);
    if (!starts || !ends || starts->size() != ends->size()) return std::nullopt;
    Dims axes = ints(3) ? *ints(3) : Dims(), steps = ints(4) ? *ints(4) : Dims(starts->size(), 1);
    if (axes.empty())
      for (std::size_t i = 0; i < starts->size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
    if (axes.size() != starts->size() || steps.size() != starts->size()) return std::nullopt;
    Dims out = x;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const auto axis = axis_in(axes[i], x.size());
      if (!axis || steps[i] < 1) return std::nullopt;
      const std::int64_t n = x[*axis];
      const auto clamp = [&](std::int64_t v) { return std::clamp<std::int64_t>(v < 0 ? v + n : v, 0, n); };
      const std::int64_t start = clamp((*starts)[i]), end = clamp((*ends)[i]);
      out[*axis] = end > start ? (end - start - 1) / steps[i] + 1 : 0;
    }
    return out;
  }
  if (op == "Gather") {
    const auto axis = axis_in(node.integer("axis", 0), x.size());
    if (!axis || !has(1)) return std::nullopt;
    Dims out(x.begin(), x.begin() + *axis);
    out.insert(out.end(), dims[1]->begin(), dims[1]->end());
    out.insert(out.end(), x.begin() + *axis + 1, x.end());
    return out;
  }
  if (op == "Expand") {
    const Dims* shape = ints(1);
    return shape ? broadcast(x, *shape) : std::nullopt;
  }
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") {
    Dims axes = ints(1) ? *ints(1) : node.integers("axes", {});
    if (axes.empty())
      for (std::size_t d = 0; d < x.size(); ++d) axes.push_back(static_cast<std::int64_t>(d));
    Dims out = x;
    std::vector<bool> reduced(x.size(), false);
    for (const std::int64_t a : axes) {
      const auto axis = axis_in(a, x.size());
      if (!axis) return std::nullopt;
      reduced[*axis] = true;
      out[*axis] = 1;
    }
    if (node.integer("keepdims", 1) != 0) return out;
    Dims kept;
    for (std::size_t d = 0; d < x.size(); ++d)
      if (!reduced[d]) kept.push_back(x[d]);
    return kept;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    Dims axes = ints(1) ? *ints(1) : node.integers("axes", {});
    if (op == "Squeeze") {
      std::vector<bool> gone(x.size(), axes.empty());
      for (const std::int64_t a : axes) {
        const auto axis = axis_in(a, x.size());
        if (!axis || x[*axis] != 1) return std::nullopt;
        gone[*axis] = true;
      }
      Dims out;
      for (std::size_t d = 0; d < x.size(); ++d)
        if (!gone[d] || x[d] != 1) out.push_back(x[d]);
      return out;
    }
    const std::size_t rank = x.size() + axes.size();
    std::vector<bool> added(rank, false);
    for (const std::int64_t a : axes) {
      const auto axis = axis_in(a, rank);
      if (!axis || added[*axis]) return std::nullopt;
      added[*axis] = true;
    }
    Dims out;
    for (std::size_t d = 0, from = 0; d < rank; ++d) out.push_back(added[d] ? 1 : x[from++]);
    return out;
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    if (x.size() < 3) return std::nullopt;
    Dims out = x;
    std::fill(out.begin() + 2, out.end(), 1);
    return out;
  }
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
    const std::string auto_pad = node.text("auto_pad", "NOTSET");
    // A convolution's auto_pad SAME gives ceil(size / stride) outputs, VALID pads nothing (graph_model.cpp).
    const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
    if (x.size() < 3 || (auto_pad != "NOTSET" && !(op == "Conv" && (same || auto_pad == "VALID"))))
      return std::nullopt;
    const std::size_t spatial = x.size() - 2;
    Dims kernel = node.integers("kernel_shape", {});
    Dims out = {x[0], x[1]};
    if (op == "Conv") {
      if (!has(1) || dims[1]->size() != x.size()) return std::nullopt;
      out[1] = (*dims[1])[0];
      if (kernel.empty()) kernel.assign(dims[1]->begin() + 2, dims[1]->end());
    }
    const Dims strides = node.integers("strides", Dims(spatial, 1)), dilations = node.integers("dilations", Dims(spatial, 1)),
               pads = auto_pad == "NOTSET" ? node.integers("pads", Dims(2 * spatial, 0)) : Dims(2 * spatial, 0);
    if (kernel.size() != spatial || strides.size() != spatial || dilations.size() != spatial || pads.size() != 2 * spatial)
      return std::nullopt;
    if (same) {
      for (std::size_t d = 0; d < spatial; ++d) {
        if (strides[d] < 1) return std::nullopt;
        out.push_back((x[2 + d] + strides[d] - 1) / strides[d]);
      }
      return out;
    }
    const bool ceil = node.integer("ceil_mode", 0) != 0;
    for (std::size_t d = 0; d < spatial; ++d) {
      std::int64_t both = 0;
      if (__builtin_add_overflow(pads[d], pads[d + spatial], &both)) return std::nullopt;
      const auto size = windows(x[2 + d], kernel[d], strides[d], dilations[d], both, ceil);
      if (!size) return std::nullopt;
      out.push_back(*size);
    }
    return out;
  }
  if (op == "Pad") {
    const Dims* pads = ints(1);
    if (!pads || pads->size() != 2 * x.size()) return std::nullopt;
    Dims out = x;
    for (std::size_t d = 0; d < x.size(); ++d)
      if (__builtin_add_overflow(out[d], (*pads)[d], &out[d]) ||
          __builtin_add_overflow(out[d], (*pads)[d + x.size()], &out[d]) || out[d] < 0)
        return std::nullopt;
    return out;
  }
  return std::nullopt;
}

}  // namespace ddl::onnx
