#include "core/graph/shape_rules.hpp"

#include <algorithm>
#include <string>

namespace ddl::shapes {

std::string text(const Dims& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

Dims strides_of(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (std::size_t d = dims.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<std::int64_t>(dims[d], 1);
  return strides;
}

std::int64_t count(const Dims& dims, std::int64_t limit) {
  std::int64_t n = 1;
  for (const std::int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > limit) throw ShapeError("gives a tensor of dims " + text(dims));
  return n;
}

std::int64_t axis_in(std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r)
    throw ShapeError("axis " + std::to_string(axis) + " is outside a tensor of rank " + std::to_string(r));
  return axis < 0 ? axis + r : axis;
}

Dims broadcast(const Dims& a, const Dims& b) {
  Dims out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1, y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) throw ShapeError("cannot broadcast " + text(a) + " with " + text(b));
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

Dims broadcast_strides(const Dims& in, const Dims& out) {
  const Dims own = strides_of(in);
  Dims strides(out.size(), 0);
  const std::size_t lead = out.size() - in.size();
  for (std::size_t d = 0; d < in.size(); ++d) strides[lead + d] = in[d] == 1 ? 0 : own[d];
  return strides;
}

Dims reshape(const Dims& in, const Dims& shape, bool allow_zero) {
  const auto fail = [&] { throw ShapeError("cannot reshape " + text(in) + " to " + text(shape)); };
  Dims out;
  std::int64_t known = 1;
  std::size_t free = shape.size();
  for (std::size_t i = 0; i < shape.size(); ++i) {
    std::int64_t d = shape[i];
    if (d == 0 && !allow_zero) {
      if (i >= in.size()) fail();
      d = in[i];
    }
    if (d == -1 && free == shape.size())
      free = i;
    else if (d < 0 || __builtin_mul_overflow(known, d, &known))
      fail();
    out.push_back(d);
  }
  const std::int64_t n = count(in);
  if (free < shape.size()) {
    if (known == 0 || n % known != 0) fail();
    out[free] = n / known;
  }
  if (count(out) != n) fail();
  return out;
}

Dims flatten(const Dims& in, std::int64_t axis) {
  if (axis < 0) axis += static_cast<std::int64_t>(in.size());
  if (axis < 0 || axis > static_cast<std::int64_t>(in.size()))
    throw ShapeError("flattens from axis " + std::to_string(axis) + " of " + text(in));
  return {count(Dims(in.begin(), in.begin() + axis)), count(Dims(in.begin() + axis, in.end()))};
}

Dims squeeze(const Dims& in, const Dims& axes, bool keep_batch) {
  std::vector<bool> dropped(in.size(), false);
  for (const std::int64_t a : axes) {
    const std::int64_t d = axis_in(a, in.size());
    if (in[d] != 1) throw ShapeError("cannot squeeze axis " + std::to_string(a) + " of " + text(in));
    dropped[d] = true;
  }
  if (axes.empty())
    for (std::size_t d = keep_batch ? 1 : 0; d < in.size(); ++d) dropped[d] = in[d] == 1;
  Dims out;
  for (std::size_t d = 0; d < in.size(); ++d)
    if (!dropped[d]) out.push_back(in[d]);
  return out;
}

Dims unsqueeze(const Dims& in, const Dims& axes) {
  const std::size_t rank = in.size() + axes.size();
  std::vector<bool> inserted(rank, false);
  for (const std::int64_t a : axes) {
    const std::int64_t d = axis_in(a, rank);
    if (inserted[d]) throw ShapeError("inserts axis " + std::to_string(a) + " twice");
    inserted[d] = true;
  }
  Dims out;
  for (std::size_t d = 0, next = 0; d < rank; ++d) out.push_back(inserted[d] ? 1 : in[next++]);
  return out;
}

Dims permutation(const Dims& in, const Dims& perm) {
  Dims p = perm;
  if (p.empty())
    for (std::size_t d = in.size(); d-- > 0;) p.push_back(static_cast<std::int64_t>(d));
  if (p.size() != in.size()) throw ShapeError("its permutation does not fit " + text(in));
  std::vector<bool> seen(in.size(), false);
  for (auto& a : p) {
    a = axis_in(a, in.size());
    if (seen[a]) throw ShapeError("its permutation takes axis " + std::to_string(a) + " twice");
    seen[a] = true;
  }
  return p;
}

Dims transpose(const Dims& in, const Dims& perm) {
  Dims out;
  for (const std::int64_t p : permutation(in, perm)) out.push_back(in[p]);
  return out;
}

std::vector<bool> reduced_axes(const Dims& in, const Dims& axes) {
  std::vector<bool> reduced(in.size(), axes.empty());
  for (const std::int64_t a : axes) reduced[axis_in(a, in.size())] = true;
  return reduced;
}

Dims reduce(const Dims& in, const Dims& axes, bool keep_dims) {
  const auto reduced = reduced_axes(in, axes);
  Dims out;
  for (std::size_t d = 0; d < in.size(); ++d)
    if (!reduced[d])
      out.push_back(in[d]);
    else if (keep_dims)
      out.push_back(1);
  return out;
}

Dims concat(const std::vector<Dims>& in, std::int64_t axis) {
  if (in.empty()) throw ShapeError("joins nothing");
  Dims out = in[0];
  const std::int64_t a = axis_in(axis, out.size());
  for (std::size_t i = 1; i < in.size(); ++i) {
    Dims other = in[i];
    if (other.size() != out.size()) throw ShapeError("joins " + text(out) + " and " + text(in[i]));
    const std::int64_t along = other[a];
    other[a] = out[a];
    if (other != out || __builtin_add_overflow(out[a], along, &out[a]))
      throw ShapeError("joins " + text(in[0]) + " and " + text(in[i]) + " along axis " + std::to_string(axis));
  }
  return out;
}

Dims gather(const Dims& in, std::int64_t axis, const Dims& index_dims) {
  const std::int64_t a = axis_in(axis, in.size());
  Dims out(in.begin(), in.begin() + a);
  out.insert(out.end(), index_dims.begin(), index_dims.end());
  out.insert(out.end(), in.begin() + a + 1, in.end());
  return out;
}

SlicePlan slice(const Dims& in, const Dims& starts, const Dims& ends, const Dims& axes_given, const Dims& steps_given) {
  Dims axes = axes_given, steps = steps_given;
  if (axes.empty())
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    throw ShapeError("its starts, ends, axes and steps differ in length");
  SlicePlan plan{0, in, strides_of(in)};
  std::vector<bool> seen(in.size(), false);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::int64_t a = axis_in(axes[i], in.size()), n = in[a];
    if (seen[a] || steps[i] == 0)
      throw ShapeError("slices axis " + std::to_string(axes[i]) + " twice or with a step of 0");
    seen[a] = true;
    if (n == 0) continue;  // nothing to read, whichever the step
    // A step longer than the axis takes one element, as a step of the axis' length does.
    const std::int64_t s = std::clamp<std::int64_t>(steps[i], -std::max<std::int64_t>(n, 1), std::max<std::int64_t>(n, 1));
    const auto from_back = [&](std::int64_t v) { return v < 0 ? (v < -n ? -1 : v + n) : v; };
    std::int64_t first = from_back(starts[i]), last = from_back(ends[i]);
    std::int64_t length = 0;
    if (s > 0) {
      first = std::clamp<std::int64_t>(first, 0, n);
      last = std::clamp<std::int64_t>(last, 0, n);
      length = last > first ? (last - first - 1) / s + 1 : 0;
    } else {
      first = std::clamp<std::int64_t>(first, 0, n - 1);
      last = std::clamp<std::int64_t>(last, -1, n - 1);
      length = first > last ? (first - last - 1) / -s + 1 : 0;
    }
    plan.dims[a] = length;
    if (length > 0) plan.offset += first * plan.strides[a];
    plan.strides[a] *= s;
  }
  return plan;
}

}  // namespace ddl::shapes
