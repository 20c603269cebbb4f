#include "core/layers/subgraph.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <unordered_map>

#include "core/error.hpp"

namespace ddl {
namespace {

using Kind = SubgraphOp::Kind;
using dim = dnnl::memory::dim;

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::add: return "add";
    case Kind::sub: return "sub";
    case Kind::mul: return "mul";
    case Kind::div: return "div";
    case Kind::pow: return "pow";
    case Kind::sqrt: return "sqrt";
    case Kind::erf: return "erf";
    case Kind::relu: return "relu";
    case Kind::sigmoid: return "sigmoid";
    case Kind::tanh: return "tanh";
    case Kind::gelu: return "gelu";
    case Kind::identity: return "identity";
    case Kind::matmul: return "matmul";
    case Kind::softmax: return "softmax";
    case Kind::layer_norm: return "layer_norm";
    case Kind::reduce_mean: return "reduce_mean";
    case Kind::transpose: return "transpose";
    case Kind::reshape: return "reshape";
    case Kind::squeeze: return "squeeze";
    case Kind::unsqueeze: return "unsqueeze";
    case Kind::expand: return "expand";
    case Kind::concat: return "concat";
    case Kind::slice: return "slice";
    case Kind::gather: return "gather";
  }
  return "?";
}

dims_t strides_of(const dims_t& dims) {
  dims_t strides(dims.size(), 1);
  for (std::size_t d = dims.size(); d-- > 1;) strides[d - 1] = strides[d] * dims[d];
  return strides;
}

// The strides that read a tensor of `in` dims at each element of `out` dims that it broadcasts to (0 along
// the axes it repeats), numpy's rule: the shapes aligned at their last axes.
dims_t broadcast_strides(const dims_t& in, const dims_t& out) {
  const dims_t own = strides_of(in);
  dims_t strides(out.size(), 0);
  const std::size_t lead = out.size() - in.size();
  for (std::size_t d = 0; d < in.size(); ++d) strides[lead + d] = in[d] == 1 ? 0 : own[d];
  return strides;
}

// Calls fn(o, a, b) for each element of `dims` in row-major order: o its row-major offset, a and b its
// offsets under the strides sa and sb.
template <class F>
void walk(const dims_t& dims, const dims_t& sa, const dims_t& sb, F&& fn) {
  const std::size_t n = product(dims);
  if (n == 0) return;
  if (dims.empty()) {
    fn(std::size_t{0}, dim{0}, dim{0});
    return;
  }
  const std::size_t last = dims.size() - 1;
  dims_t at(dims.size(), 0);
  dim a = 0, b = 0;
  for (std::size_t o = 0; o < n;) {
    for (dim k = 0; k < dims[last]; ++k, ++o) fn(o, a + k * sa[last], b + k * sb[last]);
    for (std::size_t d = last; d-- > 0;) {
      a += sa[d];
      b += sb[d];
      if (++at[d] < dims[d]) break;
      a -= sa[d] * dims[d];
      b -= sb[d] * dims[d];
      at[d] = 0;
    }
  }
}

// Tensors from this many elements are walked by every OpenMP thread, each taking whole rows.
constexpr std::size_t kParallelFrom = std::size_t{1} << 14;

// walk, with the rows (the elements along the last axis) shared among the OpenMP threads: for an fn that
// writes only at o, or at an offset that no other element writes (a transpose's, a slice's).
template <class F>
void walk_in_parallel(const dims_t& dims, const dims_t& sa, const dims_t& sb, F&& fn) {
  const std::size_t n = product(dims);
  if (n < kParallelFrom || dims.empty()) return walk(dims, sa, sb, fn);
  const std::size_t last = dims.size() - 1;
  const dim cols = dims[last], rows = static_cast<dim>(n) / cols;
#pragma omp parallel for
  for (dim r = 0; r < rows; ++r) {
    dim a = 0, b = 0, rest = r;
    for (std::size_t d = last; d-- > 0;) {
      const dim at = rest % dims[d];
      rest /= dims[d];
      a += at * sa[d];
      b += at * sb[d];
    }
    const std::size_t o = static_cast<std::size_t>(r * cols);
    for (dim k = 0; k < cols; ++k) fn(o + k, a + k * sa[last], b + k * sb[last]);
  }
}

// to[i] += from[i], by every OpenMP thread where there are many.
void add_into(float* to, const float* from, std::size_t n) {
  if (!to) return;
#pragma omp parallel for if (n >= kParallelFrom)
  for (std::size_t i = 0; i < n; ++i) to[i] += from[i];
}

dim axis_in(dim axis, std::size_t rank) { return axis < 0 ? axis + static_cast<dim>(rank) : axis; }

// Where a slice starts reading and the strides it reads with, and its dims.
struct SlicePlan {
  dim offset = 0;
  dims_t dims, strides;
};

SlicePlan plan_slice(const SubgraphOp& op, const dims_t& in) {
  SlicePlan plan{0, in, strides_of(in)};
  for (std::size_t i = 0; i < op.ints.size(); ++i) {
    const dim axis = axis_in(op.ints[i], in.size()), n = in[axis], step = op.steps.empty() ? 1 : op.steps[i];
    const auto clamp = [&](dim v) { return std::clamp<dim>(v < 0 ? v + n : v, 0, n); };
    const dim start = clamp(op.starts[i]), end = clamp(op.ends[i]);
    plan.dims[axis] = end > start ? (end - start - 1) / step + 1 : 0;
    plan.offset += start * plan.strides[axis];
    plan.strides[axis] *= step;
  }
  return plan;
}

// The strides that read a transpose's input at each element of its output: the input's, permuted.
dims_t permuted_strides(const SubgraphOp& op, const dims_t& in) {
  const dims_t own = strides_of(in);
  dims_t strides;
  for (std::size_t d = 0; d < in.size(); ++d) strides.push_back(own[op.ints.empty() ? in.size() - 1 - d : op.ints[d]]);
  return strides;
}

// A reduction's dims with the reduced axes kept, as 1.
dims_t kept_dims(const SubgraphOp& op, dims_t dims) {
  for (const dim axis : op.ints) dims[axis_in(axis, dims.size())] = 1;
  return dims;
}

dnnl::memory::desc strided(const dims_t& dims, const dims_t& strides) {
  return dnnl::memory::desc(dims, dt::f32, strides);
}

// The same plain tensor seen with its last two axes swapped.
dnnl::memory::desc transposed(const dims_t& dims) {
  dims_t d = dims, s = strides_of(dims);
  const std::size_t r = dims.size();
  std::swap(d[r - 1], d[r - 2]);
  std::swap(s[r - 1], s[r - 2]);
  return strided(d, s);
}

// The parts of a gather (one an index) or a concat (one an input) along the axis: fn(x, part, from, into, to)
// for each, where the part's `part` dims of x, from x's offset `from`, go to the output's offset `to` with
// the output's strides `into`.
template <class Values, class F>
void for_each_part(const SubgraphOp& op, Values& values, const dims_t& out, F&& fn) {
  auto& a = values[op.inputs[0]];
  const dim axis = axis_in(op.axis, a.dims.size());
  dims_t full = a.dims;  // the output with a gather's dropped axis kept
  full[axis] = op.kind == Kind::gather ? static_cast<dim>(op.indices.size()) : out[axis];
  const dims_t into = strides_of(full);
  dim at = 0;
  const std::size_t parts = op.kind == Kind::gather ? op.indices.size() : op.inputs.size();
  for (std::size_t q = 0; q < parts; ++q) {
    auto& x = op.kind == Kind::gather ? a : values[op.inputs[q]];
    dims_t part = x.dims;
    dim from = 0;
    if (op.kind == Kind::gather) {
      part[axis] = 1;
      from = (op.indices[q] < 0 ? op.indices[q] + a.dims[axis] : op.indices[q]) * strides_of(a.dims)[axis];
    }
    fn(x, part, from, into, at * into[axis]);
    at += part[axis];
  }
}

// Operations whose output is their input's numbers as they are.
bool aliases_input(const SubgraphOp& op) {
  return op.kind == Kind::identity || op.kind == Kind::reshape || op.kind == Kind::squeeze || op.kind == Kind::unsqueeze;
}

dnnl::memory over(const dnnl::memory::desc& md, Context& ctx, const float* data) {
  return dnnl::memory(md, ctx.engine(), const_cast<float*>(data));
}

}  // namespace

Subgraph::Subgraph(std::vector<ParamSpec> params, std::vector<SubgraphConstant> constants, std::vector<SubgraphOp> ops)
    : params_(std::move(params)), constants_(std::move(constants)), ops_(std::move(ops)) {
  if (ops_.empty()) throw Error("subgraph: no operation");
  std::size_t known = 1 + params_.size() + constants_.size();
  for (const SubgraphOp& op : ops_) {
    const std::size_t n = op.inputs.size();
    const bool binary = op.kind == Kind::add || op.kind == Kind::sub || op.kind == Kind::mul || op.kind == Kind::div;
    const bool arity = binary                           ? n == 2
                       : op.kind == Kind::matmul        ? n == 2 || n == 3
                       : op.kind == Kind::layer_norm    ? n == 3
                       : op.kind == Kind::concat        ? n >= 1
                                                        : n == 1;
    if (!arity) throw Error("subgraph: " + op.name + " has " + std::to_string(n) + " inputs");
    if (op.kind == Kind::slice && (op.starts.size() != op.ints.size() || op.ends.size() != op.ints.size() ||
                                   (!op.steps.empty() && op.steps.size() != op.ints.size())))
      throw Error("subgraph: " + op.name + ": its axes, starts, ends and steps differ in length");
    for (const int in : op.inputs)
      if (in < 0 || static_cast<std::size_t>(in) >= known) throw Error("subgraph: " + op.name + " reads a later value");
    ++known;
  }
}

std::string Subgraph::describe() const {
  std::map<std::string, int> counts;
  for (const SubgraphOp& op : ops_) ++counts[kind_name(op.kind)];
  std::string s = "subgraph of " + std::to_string(ops_.size()) + " operations (";
  for (const auto& [name, count] : counts) s += name + " " + std::to_string(count) + ", ";
  s.resize(s.size() - 2);
  return s + ")";
}

void Subgraph::bind(const std::vector<ParamView>& views, Context& /*ctx*/) { views_ = views; }

void Subgraph::fail(const SubgraphOp& op, const std::string& problem) const {
  throw InputError(op.name + ": " + problem);
}

dims_t Subgraph::output_dims(const SubgraphOp& op, std::int64_t batch) const {
  const auto in = [&](std::size_t i) -> const dims_t& { return values_.at(op.inputs.at(i)).dims; };
  const auto text = [](const dims_t& d) { return to_string(d); };
  const auto broadcast = [&](const dims_t& a, const dims_t& b) {
    dims_t out(std::max(a.size(), b.size()));
    for (std::size_t i = 0; i < out.size(); ++i) {
      const dim x = i < a.size() ? a[a.size() - 1 - i] : 1, y = i < b.size() ? b[b.size() - 1 - i] : 1;
      if (x != y && x != 1 && y != 1) fail(op, "cannot broadcast " + text(a) + " with " + text(b));
      out[out.size() - 1 - i] = x == 1 ? y : x;
    }
    return out;
  };
  const auto resolved = [&](std::int64_t v) { return v <= kBatchTimes && v % kBatchTimes == 0 ? v / kBatchTimes * batch : v; };
  const auto check_axis = [&](std::int64_t axis, std::size_t rank) {
    const dim a = axis_in(axis, rank);
    if (a < 0 || a >= static_cast<dim>(rank)) fail(op, "axis " + std::to_string(axis) + " is outside rank " + std::to_string(rank));
    return a;
  };
  switch (op.kind) {
    case Kind::add:
    case Kind::sub:
    case Kind::mul:
    case Kind::div:
      return broadcast(in(0), in(1));
    case Kind::pow:
    case Kind::sqrt:
    case Kind::erf:
    case Kind::relu:
    case Kind::sigmoid:
    case Kind::tanh:
    case Kind::gelu:
    case Kind::identity:
      return in(0);
    case Kind::softmax:
      check_axis(op.axis, in(0).size());
      return in(0);
    case Kind::layer_norm: {
      const dims_t& x = in(0);
      if (x.empty() || product(in(1)) != static_cast<std::size_t>(x.back()) || product(in(2)) != product(in(1)))
        fail(op, "its scale " + text(in(1)) + " and shift " + text(in(2)) + " do not fit " + text(x));
      return x;
    }
    case Kind::matmul: {
      dims_t a = in(0), b = in(1);
      if (op.transpose_b) {
        if (b.size() != 2) fail(op, "ddl reads a transposed second operand of rank 2 only, not " + text(b));
        std::swap(b[0], b[1]);
      }
      if (a.size() < 2 || b.size() < 2) fail(op, "ddl multiplies matrices, not vectors: " + text(a) + " by " + text(b));
      const std::size_t r = std::max(a.size(), b.size());
      a.insert(a.begin(), r - a.size(), 1);
      b.insert(b.begin(), r - b.size(), 1);
      if (a[r - 1] != b[r - 2]) fail(op, "cannot multiply " + text(in(0)) + " by " + text(in(1)));
      if (op.inputs.size() > 2 && (in(1).size() != 2 || product(in(2)) != static_cast<std::size_t>(b[r - 1])))
        fail(op, "its bias " + text(in(2)) + " does not fit a product by one matrix " + text(in(1)));
      const dims_t a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
      if (b_batch != a_batch && product(b_batch) != 1)
        fail(op, "ddl multiplies by one matrix or by one a batch, not " + text(in(0)) + " by " + text(in(1)));
      dims_t out = a_batch;
      out.push_back(a[r - 2]);
      out.push_back(b[r - 1]);
      return out;
    }
    case Kind::reduce_mean: {
      for (const dim axis : op.ints) check_axis(axis, in(0).size());
      const dims_t kept = kept_dims(op, in(0));
      if (op.keep_dims) return kept;
      dims_t out;
      for (std::size_t d = 0; d < kept.size(); ++d)
        if (std::none_of(op.ints.begin(), op.ints.end(), [&](dim a) { return axis_in(a, kept.size()) == static_cast<dim>(d); }))
          out.push_back(kept[d]);
      return out;
    }
    case Kind::transpose: {
      const dims_t& x = in(0);
      dims_t perm = op.ints;
      if (perm.empty())
        for (std::size_t d = x.size(); d-- > 0;) perm.push_back(static_cast<dim>(d));
      dims_t sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t d = 0; d < sorted.size(); ++d)
        if (sorted.size() != x.size() || sorted[d] != static_cast<dim>(d)) fail(op, "its permutation does not fit " + text(x));
      dims_t out;
      for (const dim p : perm) out.push_back(x[p]);
      return out;
    }
    case Kind::reshape: {
      const dims_t& x = in(0);
      dims_t out;
      std::size_t free = op.ints.size(), known = 1;
      for (std::size_t i = 0; i < op.ints.size(); ++i) {
        dim d = resolved(op.ints[i]);
        if (d == 0) d = i < x.size() ? x[i] : -2;
        if (d == -1 && free == op.ints.size()) free = i;
        else if (d < 0) fail(op, "cannot reshape " + text(x) + " to this shape");
        else known *= static_cast<std::size_t>(d);
        out.push_back(d);
      }
      if (free < out.size() && known > 0) out[free] = static_cast<dim>(product(x) / known);
      if (product(out) != product(x)) fail(op, "cannot reshape " + text(x) + " to " + text(out));
      return out;
    }
    case Kind::squeeze: {
      const dims_t& x = in(0);
      std::vector<bool> dropped(x.size(), false);
      for (const std::int64_t axis : op.ints) {
        const dim a = check_axis(axis, x.size());
        if (x[a] != 1) fail(op, "cannot squeeze axis " + std::to_string(axis) + " of " + text(x));
        dropped[a] = true;
      }
      // Without axes every axis of size 1 goes but the batch (axis 0), which is 1 where a model is set up for
      // one image.
      dims_t out;
      for (std::size_t d = 0; d < x.size(); ++d)
        if (op.ints.empty() ? d == 0 || x[d] != 1 : !dropped[d]) out.push_back(x[d]);
      return out;
    }
    case Kind::unsqueeze: {
      const std::size_t rank = in(0).size() + op.ints.size();
      std::vector<bool> inserted(rank, false);
      for (const std::int64_t axis : op.ints) {
        const dim a = check_axis(axis, rank);
        if (inserted[a]) fail(op, "inserts axis " + std::to_string(axis) + " twice");
        inserted[a] = true;
      }
      dims_t out;
      for (std::size_t d = 0, next = 0; d < rank; ++d) out.push_back(inserted[d] ? 1 : in(0)[next++]);
      return out;
    }
    case Kind::expand: {
      dims_t shape;
      for (const std::int64_t v : op.ints) shape.push_back(resolved(v));
      return broadcast(in(0), shape);
    }
    case Kind::concat: {
      dims_t out = in(0);
      const dim axis = check_axis(op.axis, out.size());
      for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        dims_t other = in(i);
        if (other.size() != out.size()) fail(op, "joins " + text(out) + " and " + text(other));
        const dim along = other[axis];
        other[axis] = out[axis];
        if (other != out) fail(op, "joins " + text(out) + " and " + text(in(i)));
        out[axis] += along;
      }
      return out;
    }
    case Kind::slice:
      for (std::size_t i = 0; i < op.ints.size(); ++i) {
        const dim axis = check_axis(op.ints[i], in(0).size());
        for (std::size_t j = 0; j < i; ++j)
          if (axis_in(op.ints[j], in(0).size()) == axis) fail(op, "slices axis " + std::to_string(axis) + " twice");
        if (!op.steps.empty() && op.steps[i] < 1) fail(op, "ddl slices with positive steps only");
      }
      return plan_slice(op, in(0)).dims;
    case Kind::gather: {
      dims_t out = in(0);
      const dim axis = check_axis(op.axis, out.size());
      for (const std::int64_t i : op.indices)
        if (i < -out[axis] || i >= out[axis]) fail(op, "index " + std::to_string(i) + " is outside " + text(out));
      if (op.scalar_index)
        out.erase(out.begin() + axis);
      else
        out[axis] = static_cast<dim>(op.indices.size());
      return out;
    }
  }
  fail(op, "unknown operation");
}

dnnl::memory::desc Subgraph::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  if (views_.size() != params_.size()) throw Error("subgraph: set up before its parameters were bound");
  const dims_t in = dims_of(src);
  src_md_ = src;
  train_ = mode == Mode::train;
  need_diff_src_ = train_ && need_diff_src;
  values_.assign(first_op() + ops_.size(), Value{});
  outputs_.clear();
  outputs_.resize(ops_.size());
  output_grads_.clear();
  output_grads_.resize(ops_.size());
  matmuls_.clear();
  matmuls_.resize(ops_.size());
  softmaxes_.assign(ops_.size(), std::nullopt);
  norms_.clear();
  norms_.resize(ops_.size());
  gelus_.clear();
  gelus_.resize(ops_.size());

  const auto flat = [](const dims_t& dims) { return plain_desc({static_cast<dim>(std::max<std::size_t>(product(dims), 1))}); };
  input_ = Tensor(plain_desc(in), ctx.engine());
  to_plain_ = Copy(ctx, src, input_.desc());
  values_[0] = {in, input_.data(), nullptr};
  needs_grad_.assign(values_.size(), false);
  needs_grad_[0] = need_diff_src_;
  if (need_diff_src_) to_src_layout_ = Copy(ctx, input_.desc(), src);
  diff_src_.reset(need_diff_src_ ? src : dnnl::memory::desc());
  for (std::size_t p = 0; p < params_.size(); ++p) {
    values_[1 + p] = {params_[p].dims, views_[p].value.data(), train_ ? views_[p].grad.data() : nullptr};
    needs_grad_[1 + p] = train_;
  }
  for (std::size_t c = 0; c < constants_.size(); ++c)
    values_[1 + params_.size() + c] = {constants_[c].dims, constants_[c].values.data(), nullptr};

  std::size_t largest = 0;
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const SubgraphOp& op = ops_[k];
    const dims_t out = output_dims(op, in.at(0));
    // A damaged file's shape can be anything: each dimension positive, and the whole within 2^40 values.
    dim count = 1;
    for (const dim d : out)
      if (d < 1 || __builtin_mul_overflow(count, d, &count) || count > (dim{1} << 40))
        fail(op, "gives a tensor of dims " + to_string(out));
    const bool last = k + 1 == ops_.size();
    if (last && (out.empty() || out.size() > 5)) fail(op, "ends the piece with a tensor of rank " + std::to_string(out.size()));
    Value& v = values_[first_op() + k];
    if (aliases_input(op) && !last) {  // the same numbers: its input's storage, no copy
      v = {out, values_[op.inputs[0]].data, nullptr};
    } else {
      outputs_[k] = Tensor(last ? plain_desc(out) : flat(out), ctx.engine());
      v = {out, outputs_[k].data(), nullptr};
    }
    needs_grad_[first_op() + k] = std::any_of(op.inputs.begin(), op.inputs.end(), [&](int i) { return needs_grad_[i]; });
    largest = std::max(largest, product(out));
    const auto& engine = ctx.engine();
    if (op.kind == Kind::matmul) {
      MatMul m;
      dims_t a = values_[op.inputs[0]].dims, b = values_[op.inputs[1]].dims, c = out;
      if (op.transpose_b) std::swap(b[0], b[1]);
      const std::size_t r = out.size();
      a.insert(a.begin(), r - a.size(), 1);
      b.insert(b.begin(), r - b.size(), 1);
      if (product(dims_t(b.begin(), b.end() - 2)) == 1) {
        // One matrix for every batch (a weight): a's batches are rows of one product, [rows, inner] by
        // [inner, cols], not many products of a few rows each (attention's [tokens, batch, features]).
        const dim rows = static_cast<dim>(product(a) / a[r - 1]);
        a = {rows, a[r - 1]};
        b = {b[r - 2], b[r - 1]};
        c = {rows, b[1]};
      }
      m.transpose_b = op.transpose_b;
      m.a = strided(a, strides_of(a));
      m.c = strided(c, strides_of(c));
      // b is kept as [cols, inner] where transpose_b: seen as [inner, cols] it is the transposed view.
      m.b = op.transpose_b ? transposed({b[1], b[0]}) : strided(b, strides_of(b));
      m.b_t = op.transpose_b ? strided({b[1], b[0]}, strides_of({b[1], b[0]})) : transposed(b);
      if (op.inputs.size() > 2) m.bias = strided({1, c.back()}, {c.back(), 1});
      m.forward = MatmulProduct(ctx, m.a, m.b, m.c, 1.0f, m.bias);
      if (train_) {
        m.grad_a = MatmulProduct(ctx, m.c, m.b_t, m.a, 1.0f, {}, true);
        if (op.transpose_b) {  // b's gradient in its stored form: c's gradient transposed, by a
          m.c_t = transposed(c);
          m.grad_b = MatmulProduct(ctx, m.c_t, m.a, m.b_t, 1.0f, {}, true);
        } else {
          m.a_t = transposed(a);
          m.grad_b = MatmulProduct(ctx, m.a_t, m.c, m.b, 1.0f, {}, true);
        }
      }
      matmuls_[k] = std::move(m);
    } else if (op.kind == Kind::softmax) {
      const auto md = strided(out, strides_of(out));
      const int axis = static_cast<int>(axis_in(op.axis, out.size()));
      const auto fwd = make_softmax_forward_pd(engine, train_ ? dnnl::prop_kind::forward_training
                                                              : dnnl::prop_kind::forward_inference, md, axis);
      SoftmaxPrimitives s{md, dnnl::softmax_forward(fwd), std::nullopt};
      if (train_) s.backward = dnnl::softmax_backward(make_softmax_backward_pd(engine, md, md, axis, fwd));
      softmaxes_[k] = std::move(s);
    } else if (op.kind == Kind::gelu) {
      const auto md = strided({static_cast<dim>(product(out))}, {1});
      const auto prop = train_ ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
      const auto fwd = make_eltwise_forward_pd(engine, prop, dnnl::algorithm::eltwise_gelu_erf, md);
      GeluPrimitives g{md, dnnl::eltwise_forward(fwd), std::nullopt};
      if (train_)
        g.backward = dnnl::eltwise_backward(
            make_eltwise_backward_pd(engine, dnnl::algorithm::eltwise_gelu_erf, md, md, 0.0f, 0.0f, fwd));
      gelus_[k] = std::move(g);
    } else if (op.kind == Kind::layer_norm) {
      using flags = dnnl::normalization_flags;
      LayerNormPrimitives n;
      const dim features = out.back(), rows = static_cast<dim>(product(out)) / features;
      n.data = strided({rows, features}, {features, 1});
      n.vector = strided({features}, {1});
      const auto prop = train_ ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
      const auto f = flags::use_scale | flags::use_shift;
      const auto fwd = make_normalization_forward_pd<dnnl::layer_normalization_forward>(engine, prop, n.data,
                                                                                        op.epsilon, f);
      n.forward = dnnl::layer_normalization_forward(fwd);
      n.mean = Tensor(fwd.mean_desc(), engine);
      n.variance = Tensor(fwd.variance_desc(), engine);
      if (train_) {
        n.backward = dnnl::layer_normalization_backward(make_normalization_backward_pd<dnnl::layer_normalization_backward>(
            engine, dnnl::prop_kind::backward, n.data, n.data, op.epsilon, f, fwd));
        n.diff_scale = Tensor(n.vector, engine);
        n.diff_shift = Tensor(n.vector, engine);
      }
      norms_[k] = std::move(n);
    }
  }
  scratch_.assign(train_ ? largest : 0, 0.0f);
  return outputs_.back().desc();
}

const Tensor& Subgraph::forward(Context& ctx, const Tensor& src) {
  (*to_plain_)(ctx, src.memory(), input_.memory());
  for (std::size_t k = 0; k < ops_.size(); ++k) forward_op(ctx, k);
  return outputs_.back();
}

const Tensor& Subgraph::backward(Context& ctx, const Tensor& diff_dst) {
  if (!train_) throw Error("subgraph: backward after a set-up for inference");
  if (!accumulate_)
    for (const ParamView& view : views_) std::fill(view.grad.begin(), view.grad.end(), 0.0f);
  const auto lease = [&](Tensor& grad, Value& value, const dnnl::memory::desc& md) {
    grad = ctx.lease(md);
    std::memset(grad.data(), 0, grad.bytes());
    value.grad = grad.data();
  };
  if (need_diff_src_) lease(input_grad_, values_[0], input_.desc());
  for (std::size_t k = 0; k < ops_.size(); ++k)
    if (Value& value = values_[first_op() + k]; needs_grad_[first_op() + k])
      lease(output_grads_[k], value, plain_desc({dim(product(value.dims))}));
  if (!output_grads_.back().empty())
    std::memcpy(output_grads_.back().data(), diff_dst.data(), product(values_.back().dims) * sizeof(float));
  // The gradients go back to the pool for the layers whose backward comes next, also when a step throws.
  struct GiveBack {
    Subgraph& layer;
    Context& ctx;
    ~GiveBack() {
      const std::size_t first = layer.first_op();
      const auto give = [&](Tensor& grad, Value& value) {
        if (!grad.empty()) ctx.give_back(grad);
        value.grad = nullptr;
      };
      give(layer.input_grad_, layer.values_[0]);
      for (std::size_t k = 0; k < layer.ops_.size(); ++k) give(layer.output_grads_[k], layer.values_[first + k]);
    }
  } give_back{*this, ctx};
  for (std::size_t k = ops_.size(); k-- > 0;)
    if (!output_grads_[k].empty()) backward_op(ctx, k);
  if (need_diff_src_) (*to_src_layout_)(ctx, input_grad_.memory(), diff_src_.get(ctx).memory());
  return diff_src_.current();
}

void Subgraph::forward_op(Context& ctx, std::size_t k) {
  const SubgraphOp& op = ops_[k];
  Value& y = values_[first_op() + k];
  const Value& a = values_[op.inputs[0]];
  const dims_t none(y.dims.size(), 0);
  switch (op.kind) {
    case Kind::add:
    case Kind::sub:
    case Kind::mul:
    case Kind::div: {
      const Value& b = values_[op.inputs[1]];
      const dims_t sa = broadcast_strides(a.dims, y.dims), sb = broadcast_strides(b.dims, y.dims);
      const float *x0 = a.data, *x1 = b.data;
      float* out = y.data;
      const auto each = [&](auto&& fn) { walk_in_parallel(y.dims, sa, sb, fn); };
      if (op.kind == Kind::add) each([&](std::size_t o, dim i, dim j) { out[o] = x0[i] + x1[j]; });
      if (op.kind == Kind::sub) each([&](std::size_t o, dim i, dim j) { out[o] = x0[i] - x1[j]; });
      if (op.kind == Kind::mul) each([&](std::size_t o, dim i, dim j) { out[o] = x0[i] * x1[j]; });
      if (op.kind == Kind::div) each([&](std::size_t o, dim i, dim j) { out[o] = x0[i] / x1[j]; });
      return;
    }
    case Kind::pow:
    case Kind::sqrt:
    case Kind::erf:
    case Kind::relu:
    case Kind::sigmoid:
    case Kind::tanh:
    case Kind::identity:
    case Kind::reshape:
    case Kind::squeeze:
    case Kind::unsqueeze: {
      if (y.data == a.data) return;  // an alias of its input
      const std::size_t n = product(y.dims);
      const float p = op.exponent;
#pragma omp parallel for if (n >= kParallelFrom)
      for (std::size_t i = 0; i < n; ++i) {
        const float x = a.data[i];
        y.data[i] = op.kind == Kind::pow       ? (p == 2.0f ? x * x : std::pow(x, p))
                    : op.kind == Kind::sqrt    ? std::sqrt(x)
                    : op.kind == Kind::erf     ? std::erf(x)
                    : op.kind == Kind::relu    ? std::max(x, 0.0f)
                    : op.kind == Kind::sigmoid ? 1.0f / (1.0f + std::exp(-x))
                    : op.kind == Kind::tanh    ? std::tanh(x)
                                               : x;
      }
      return;
    }
    case Kind::matmul: {
      MatMul& m = *matmuls_[k];
      m.forward(ctx, over(m.a, ctx, a.data), over(m.b, ctx, values_[op.inputs[1]].data), over(m.c, ctx, y.data),
                op.inputs.size() > 2 ? over(m.bias, ctx, values_[op.inputs[2]].data) : dnnl::memory());
      return;
    }
    case Kind::softmax: {
      const SoftmaxPrimitives& m = *softmaxes_[k];
      m.forward.execute(ctx.stream(), {{DNNL_ARG_SRC, over(m.data, ctx, a.data)}, {DNNL_ARG_DST, over(m.data, ctx, y.data)}});
      return;
    }
    case Kind::gelu: {
      const GeluPrimitives& g = *gelus_[k];
      g.forward.execute(ctx.stream(), {{DNNL_ARG_SRC, over(g.data, ctx, a.data)}, {DNNL_ARG_DST, over(g.data, ctx, y.data)}});
      return;
    }
    case Kind::layer_norm: {
      LayerNormPrimitives& n = *norms_[k];
      n.forward.execute(ctx.stream(), {{DNNL_ARG_SRC, over(n.data, ctx, a.data)},
                                       {DNNL_ARG_SCALE, over(n.vector, ctx, values_[op.inputs[1]].data)},
                                       {DNNL_ARG_SHIFT, over(n.vector, ctx, values_[op.inputs[2]].data)},
                                       {DNNL_ARG_MEAN, n.mean.memory()},
                                       {DNNL_ARG_VARIANCE, n.variance.memory()},
                                       {DNNL_ARG_DST, over(n.data, ctx, y.data)}});
      return;
    }
    case Kind::reduce_mean: {
      std::fill(y.data, y.data + product(y.dims), 0.0f);
      const dims_t kept = kept_dims(op, a.dims);
      walk(a.dims, broadcast_strides(kept, a.dims), dims_t(a.dims.size(), 0),
           [&](std::size_t o, dim i, dim) { y.data[i] += a.data[o]; });
      const std::size_t n = product(y.dims);
      const float scale = static_cast<float>(n) / static_cast<float>(product(a.dims));
      for (std::size_t i = 0; i < n; ++i) y.data[i] *= scale;
      return;
    }
    case Kind::transpose: {
      walk_in_parallel(y.dims, permuted_strides(op, a.dims), none, [&](std::size_t o, dim i, dim) { y.data[o] = a.data[i]; });
      return;
    }
    case Kind::expand:
      walk_in_parallel(y.dims, broadcast_strides(a.dims, y.dims), none,
                       [&](std::size_t o, dim i, dim) { y.data[o] = a.data[i]; });
      return;
    case Kind::slice: {
      const SlicePlan plan = plan_slice(op, a.dims);
      walk_in_parallel(plan.dims, plan.strides, none,
                       [&](std::size_t o, dim i, dim) { y.data[o] = a.data[plan.offset + i]; });
      return;
    }
    case Kind::gather:
    case Kind::concat:
      for_each_part(op, values_, y.dims, [&](const Value& x, const dims_t& part, dim from, const dims_t& into, dim to) {
        walk_in_parallel(part, strides_of(x.dims), into,
                         [&](std::size_t, dim i, dim j) { y.data[to + j] = x.data[from + i]; });
      });
      return;
  }
}

void Subgraph::backward_op(Context& ctx, std::size_t k) {
  const SubgraphOp& op = ops_[k];
  const Value& y = values_[first_op() + k];
  const float* gy = y.grad;
  Value& a = values_[op.inputs[0]];
  const dims_t none(y.dims.size(), 0);
  switch (op.kind) {
    case Kind::add:
    case Kind::sub:
    case Kind::mul:
    case Kind::div: {
      Value& b = values_[op.inputs[1]];
      const dims_t sa = broadcast_strides(a.dims, y.dims), sb = broadcast_strides(b.dims, y.dims);
      const float *x0 = a.data, *x1 = b.data;
      float *g0 = a.grad, *g1 = b.grad;
      // An operand of the output's dims takes each element's gradient once: its rows can be shared among the
      // threads. A broadcast one sums many into each element.
      const auto each_for = [&](const Value& x, auto&& fn) {
        x.dims == y.dims ? walk_in_parallel(y.dims, sa, sb, fn) : walk(y.dims, sa, sb, fn);
      };
      if (g0) {
        const auto each = [&](auto&& fn) { each_for(a, fn); };
        if (op.kind == Kind::add || op.kind == Kind::sub) each([&](std::size_t o, dim i, dim) { g0[i] += gy[o]; });
        if (op.kind == Kind::mul) each([&](std::size_t o, dim i, dim j) { g0[i] += gy[o] * x1[j]; });
        if (op.kind == Kind::div) each([&](std::size_t o, dim i, dim j) { g0[i] += gy[o] / x1[j]; });
      }
      if (g1) {
        const auto each = [&](auto&& fn) { each_for(b, fn); };
        if (op.kind == Kind::add) each([&](std::size_t o, dim, dim j) { g1[j] += gy[o]; });
        if (op.kind == Kind::sub) each([&](std::size_t o, dim, dim j) { g1[j] -= gy[o]; });
        if (op.kind == Kind::mul) each([&](std::size_t o, dim i, dim j) { g1[j] += gy[o] * x0[i]; });
        if (op.kind == Kind::div) each([&](std::size_t o, dim i, dim j) { g1[j] -= gy[o] * x0[i] / (x1[j] * x1[j]); });
      }
      return;
    }
    case Kind::pow:
    case Kind::sqrt:
    case Kind::erf:
    case Kind::relu:
    case Kind::sigmoid:
    case Kind::tanh:
    case Kind::identity:
    case Kind::reshape:
    case Kind::squeeze:
    case Kind::unsqueeze: {
      if (!a.grad) return;
      const std::size_t n = product(y.dims);
      const float p = op.exponent;
      const float two_over_root_pi = 2.0f / std::sqrt(std::numbers::pi_v<float>);
#pragma omp parallel for if (n >= kParallelFrom)
      for (std::size_t i = 0; i < n; ++i) {
        const float x = a.data[i];
        const float out = y.data[i];
        const float slope = op.kind == Kind::pow       ? (p == 2.0f ? 2.0f * x : p * std::pow(x, p - 1.0f))
                            : op.kind == Kind::sqrt    ? 0.5f / out
                            : op.kind == Kind::erf     ? two_over_root_pi * std::exp(-x * x)
                            : op.kind == Kind::relu    ? (x > 0.0f ? 1.0f : 0.0f)
                            : op.kind == Kind::sigmoid ? out * (1.0f - out)
                            : op.kind == Kind::tanh    ? 1.0f - out * out
                                                       : 1.0f;
        a.grad[i] += gy[i] * slope;
      }
      return;
    }
    case Kind::matmul: {
      MatMul& m = *matmuls_[k];
      const Value& b = values_[op.inputs[1]];
      if (a.grad) m.grad_a(ctx, over(m.c, ctx, gy), over(m.b_t, ctx, b.data), over(m.a, ctx, a.grad));
      if (op.inputs.size() > 2)
        if (float* bias = values_[op.inputs[2]].grad) {  // the sum of every row's gradient
          const std::size_t cols = product(values_[op.inputs[2]].dims), rows = product(y.dims) / cols;
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) bias[j] += gy[i * cols + j];
        }
      if (b.grad && m.transpose_b)
        m.grad_b(ctx, over(m.c_t, ctx, gy), over(m.a, ctx, a.data), over(m.b_t, ctx, b.grad));
      else if (b.grad)
        m.grad_b(ctx, over(m.a_t, ctx, a.data), over(m.c, ctx, gy), over(m.b, ctx, b.grad));
      return;
    }
    case Kind::softmax: {
      if (!a.grad) return;
      const SoftmaxPrimitives& m = *softmaxes_[k];
      m.backward->execute(ctx.stream(), {{DNNL_ARG_DST, over(m.data, ctx, y.data)},
                                         {DNNL_ARG_DIFF_DST, over(m.data, ctx, gy)},
                                         {DNNL_ARG_DIFF_SRC, over(m.data, ctx, scratch_.data())}});
      add_into(a.grad, scratch_.data(), product(y.dims));
      return;
    }
    case Kind::gelu: {
      if (!a.grad) return;
      const GeluPrimitives& g = *gelus_[k];
      g.backward->execute(ctx.stream(), {{DNNL_ARG_SRC, over(g.data, ctx, a.data)},
                                         {DNNL_ARG_DIFF_DST, over(g.data, ctx, gy)},
                                         {DNNL_ARG_DIFF_SRC, over(g.data, ctx, scratch_.data())}});
      add_into(a.grad, scratch_.data(), product(y.dims));
      return;
    }
    case Kind::layer_norm: {
      // oneDNN writes the three gradients; they are added where other operations' are.
      LayerNormPrimitives& n = *norms_[k];
      Value &scale = values_[op.inputs[1]], &shift = values_[op.inputs[2]];
      n.backward->execute(ctx.stream(), {{DNNL_ARG_SRC, over(n.data, ctx, a.data)},
                                         {DNNL_ARG_DIFF_DST, over(n.data, ctx, gy)},
                                         {DNNL_ARG_SCALE, over(n.vector, ctx, scale.data)},
                                         {DNNL_ARG_SHIFT, over(n.vector, ctx, shift.data)},
                                         {DNNL_ARG_MEAN, n.mean.memory()},
                                         {DNNL_ARG_VARIANCE, n.variance.memory()},
                                         {DNNL_ARG_DIFF_SRC, over(n.data, ctx, scratch_.data())},
                                         {DNNL_ARG_DIFF_SCALE, n.diff_scale.memory()},
                                         {DNNL_ARG_DIFF_SHIFT, n.diff_shift.memory()}});
      add_into(a.grad, scratch_.data(), product(y.dims));
      add_into(scale.grad, n.diff_scale.data(), product(scale.dims));
      add_into(shift.grad, n.diff_shift.data(), product(shift.dims));
      return;
    }
    case Kind::reduce_mean: {
      if (!a.grad) return;
      const float scale = static_cast<float>(product(y.dims)) / static_cast<float>(product(a.dims));
      const dims_t kept = kept_dims(op, a.dims);
      walk_in_parallel(a.dims, broadcast_strides(kept, a.dims), dims_t(a.dims.size(), 0),
                       [&](std::size_t o, dim i, dim) { a.grad[o] += gy[i] * scale; });
      return;
    }
    case Kind::transpose: {
      if (!a.grad) return;
      walk_in_parallel(y.dims, permuted_strides(op, a.dims), none, [&](std::size_t o, dim i, dim) { a.grad[i] += gy[o]; });
      return;
    }
    case Kind::expand:
      if (a.grad)
        walk(y.dims, broadcast_strides(a.dims, y.dims), none, [&](std::size_t o, dim i, dim) { a.grad[i] += gy[o]; });
      return;
    case Kind::slice: {
      if (!a.grad) return;
      const SlicePlan plan = plan_slice(op, a.dims);
      walk_in_parallel(plan.dims, plan.strides, none, [&](std::size_t o, dim i, dim) { a.grad[plan.offset + i] += gy[o]; });
      return;
    }
    case Kind::gather:
    case Kind::concat:
      // A gather may take an index twice; a concatenation's parts are apart.
      for_each_part(op, values_, y.dims, [&](Value& x, const dims_t& part, dim from, const dims_t& into, dim to) {
        const auto fn = [&](std::size_t, dim i, dim j) { x.grad[from + i] += gy[to + j]; };
        if (!x.grad) return;
        op.kind == Kind::concat ? walk_in_parallel(part, strides_of(x.dims), into, fn)
                                : walk(part, strides_of(x.dims), into, fn);
      });
      return;
  }
}

}  // namespace ddl
