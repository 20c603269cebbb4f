// The shape and indexing family: operators that move numbers without computing on them (Reshape, Transpose,
// Slice, Gather, Concat, Expand, Tile, Pad, Trilu...). Those that keep the numbers as they are (Reshape, Squeeze,
// Identity) share their input's storage.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/graph/operator_registry.hpp"
#include "core/graph/tensor_walk.hpp"
#include "core/rng.hpp"

namespace ddl {
namespace {

using walk::dim;

// A shape the graph gives, with kBatchTimes * k made k times the batch.
dims_t with_batch(const std::vector<std::int64_t>& shape, std::int64_t batch) {
  dims_t out;
  for (const std::int64_t v : shape) out.push_back(follows_batch(v) ? v / kBatchTimes * batch : v);
  return out;
}

const std::vector<std::int64_t>& integers(const OpSpec& spec, std::size_t i) {
  const auto* v = spec.integer_input(i);
  if (!v) spec.fail("its input " + std::to_string(i + 1) + " is not integers known before the graph runs");
  return *v;
}

// Numbers as they are, seen with other dims: Identity, Reshape, Flatten, Squeeze, Unsqueeze.
class SameNumbers : public Operator {
 public:
  explicit SameNumbers(OpSpec spec) : Operator(std::move(spec)) {
    if (spec_.type == "Reshape" && spec_.integer("allowzero", 0) != 0) spec_.fail("ddl takes a Reshape without allowzero");
  }
  dims_t output_dims(OpInputs in, std::int64_t batch) const override {
    const dims_t& x = input(in, 0).dims;
    const std::string& t = spec_.type;
    if (t == "Reshape") return shapes::reshape(x, with_batch(integers(spec_, 1), batch));
    if (t == "Flatten") return shapes::flatten(x, spec_.integer("axis", 1));
    // Since opset 13 the axes are an input; before, an attribute.
    const auto axes = spec_.integer_input(1) ? *spec_.integer_input(1) : spec_.ints("axes", {});
    if (t == "Squeeze") return shapes::squeeze(x, axes, true);
    if (t == "Unsqueeze") {
      if (axes.empty()) spec_.fail("it names no axes");
      return shapes::unsqueeze(x, axes);
    }
    return x;
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    if (out.data != in[0]->data) std::copy(in[0]->data, in[0]->data + product(out.dims), out.data);
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    walk::add_into(in[0]->grad, out.grad, product(out.dims));
  }
  bool aliases_input(OpInputs) const override { return true; }
  bool backward_reads_input(std::size_t, const std::vector<bool>&) const override { return false; }
  bool backward_reads_output(const std::vector<bool>&) const override { return false; }
};

// Cast of values computed on images, which ddl holds as floats whatever their ONNX type: to a float type,
// as they are (the gradient passes); to bool, 1 where not 0 (`x.bool()`, a mask); to an integer type,
// rounded toward zero (`x.long()`, an index). Neither of the last two has a gradient, as in PyTorch.
class CastOp : public Operator {
 public:
  explicit CastOp(OpSpec spec) : Operator(std::move(spec)) {
    constexpr std::int64_t kFloat = 1, kInt32 = 6, kInt64 = 7, kBool = 9, kDouble = 11;
    const std::int64_t to = spec_.integer("to", kFloat);
    if (to == kFloat || to == kDouble)
      to_ = To::same;
    else if (to == kBool)
      to_ = To::boolean;
    else if (to == kInt32 || to == kInt64)
      to_ = To::integer;
    else
      spec_.fail("casts to data type " + std::to_string(to) +
                 "; ddl casts computed values to FLOAT, DOUBLE, INT32, "
                 "INT64 and BOOL");
  }
  dims_t output_dims(OpInputs in, std::int64_t) const override { return input(in, 0).dims; }
  bool aliases_input(OpInputs) const override { return to_ == To::same; }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const std::size_t n = product(out.dims);
    const float* x = in[0]->data;
    if (to_ == To::same) {
      if (out.data != x) std::copy(x, x + n, out.data);
    } else if (to_ == To::boolean) {
      for (std::size_t i = 0; i < n; ++i) out.data[i] = x[i] != 0.0f ? 1.0f : 0.0f;
    } else {
      for (std::size_t i = 0; i < n; ++i) out.data[i] = std::trunc(x[i]);
    }
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    if (to_ == To::same) walk::add_into(in[0]->grad, out.grad, product(out.dims));
  }

 private:
  enum class To { same, boolean, integer };
  To to_ = To::same;
};

// Inverted dropout: in training each element kept with probability 1 - ratio and scaled by 1 / (1 - ratio),
// from the operator's own generator (GraphLayer seeds it); in evaluation, at ratio 0, or where the node's
// training_mode is false (ONNX's default: PyTorch's training export sets it), its input as it is.
class DropoutOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override { return input(in, 0).dims; }
  bool aliases_input(OpInputs in) const override { return !drops(in); }
  void setup(Context&, OpInputs in, const OpValue& out, bool train) override {
    ratio_ = ratio(in);
    if (!(ratio_ >= 0.0f && ratio_ < 1.0f)) spec_.fail("its ratio " + std::to_string(ratio_) + " is not in [0, 1)");
    masked_ = train && drops(in);
    mask_.assign(masked_ ? product(out.dims) : 0, 0.0f);
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const std::size_t n = product(out.dims);
    if (!masked_) {
      if (out.data != in[0]->data) std::copy(in[0]->data, in[0]->data + n, out.data);
      return;
    }
    Rng rng(0);
    rng.set_state(state_);
    const float scale = 1.0f / (1.0f - ratio_);
    for (float& m : mask_) m = rng.uniform() < ratio_ ? 0.0f : scale;
    state_ = rng.state();
    for (std::size_t i = 0; i < n; ++i) out.data[i] = in[0]->data[i] * mask_[i];
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    const std::size_t n = product(out.dims);
    if (!masked_) return walk::add_into(in[0]->grad, out.grad, n);
    for (std::size_t i = 0; i < n; ++i) in[0]->grad[i] += out.grad[i] * mask_[i];
  }
  bool backward_reads_input(std::size_t, const std::vector<bool>&) const override { return false; }
  bool backward_reads_output(const std::vector<bool>&) const override { return false; }
  std::span<std::uint64_t> generator_state() override { return state_; }

 private:
  // Before opset 12 the ratio is an attribute, since then an input.
  float ratio(OpInputs in) const { return constant_number(in, 1, spec_.real("ratio", 0.5f)); }
  bool drops(OpInputs in) const {
    const auto* training = spec_.integer_input(2);
    return ratio(in) != 0.0f && training && !training->empty() && training->front() != 0;
  }

  float ratio_ = 0;
  bool masked_ = false;
  Rng::State state_{};
  std::vector<float> mask_;
};

// Numbers read from the input under strides: Transpose, Expand, Slice, DepthToSpace and SpaceToDepth, and the
// backward that adds them back.
class Strided : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t batch) const override {
    const dims_t& x = input(in, 0).dims;
    if (spec_.type == "DepthToSpace" || spec_.type == "SpaceToDepth") return blocks(x).out;
    if (spec_.type == "Transpose") return shapes::transpose(x, spec_.ints("perm", {}));
    if (spec_.type == "Expand") return shapes::broadcast(x, with_batch(integers(spec_, 1), batch));
    return slice(x).dims;
  }
  void setup(Context&, OpInputs in, const OpValue& out, bool) override {
    const dims_t& x = in[0]->dims;
    offset_ = 0;
    walk_ = out.dims;
    if (spec_.type == "DepthToSpace" || spec_.type == "SpaceToDepth") {
      Blocks b = blocks(x);
      walk_ = std::move(b.walk);
      strides_ = std::move(b.strides);
    } else if (spec_.type == "Transpose") {
      const dims_t own = shapes::strides_of(x);
      strides_.clear();
      for (const std::int64_t p : shapes::permutation(x, spec_.ints("perm", {}))) strides_.push_back(own[p]);
    } else if (spec_.type == "Expand") {
      strides_ = shapes::broadcast_strides(x, out.dims);
    } else {
      const shapes::SlicePlan plan = slice(x);
      offset_ = plan.offset;
      strides_ = plan.strides;
    }
    // Each input element is read once (a transpose, a slice with positive or negative steps) unless broadcast.
    once_ = spec_.type != "Expand";
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const float* x = in[0]->data + offset_;
    walk::in_parallel(walk_, strides_, dims_t(walk_.size(), 0), [&](std::size_t o, dim i, dim) { out.data[o] = x[i]; });
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    if (!in[0]->grad) return;
    float* gx = in[0]->grad + offset_;
    const auto add = [&](std::size_t o, dim i, dim) { gx[i] += out.grad[o]; };
    const dims_t none(walk_.size(), 0);
    once_ ? walk::in_parallel(walk_, strides_, none, add) : walk::each(walk_, strides_, none, add);
  }
  bool backward_reads_input(std::size_t, const std::vector<bool>&) const override { return false; }
  bool backward_reads_output(const std::vector<bool>&) const override { return false; }

 private:
  shapes::SlicePlan slice(const dims_t& x) const {
    const std::vector<std::int64_t> none;
    const auto given = [&](std::size_t i) { return spec_.integer_input(i) ? *spec_.integer_input(i) : none; };
    for (std::size_t i = 1; i < 5; ++i)
      for (const std::int64_t v : given(i))
        if (follows_batch(v))
          spec_.fail("ddl takes its axes, indices and bounds as numbers that do not follow the batch");
    return shapes::slice(x, integers(spec_, 1), integers(spec_, 2), given(3), given(4));
  }
  // nn.PixelShuffle's DepthToSpace (mode CRD; DCR is ONNX's default) and SpaceToDepth on [N, C, H, W] with
  // blocks of b x b: the output, in its order, as six axes, and where each reads in the input.
  struct Blocks {
    dims_t out, walk, strides;
  };
  Blocks blocks(const dims_t& x) const {
    const dim b = spec_.integer("blocksize", 0);
    if (x.size() != 4 || b < 1) spec_.fail("ddl takes [N, C, H, W] and a blocksize of 1 or more");
    const dim n = x[0], c = x[1], h = x[2], w = x[3];
    if (spec_.type == "SpaceToDepth") {
      if (h % b != 0 || w % b != 0) spec_.fail("blocks of " + std::to_string(b) + " do not tile " + shapes::text(x));
      // Out [N, b, b, C, H/b, W/b] from in [N, C, H/b, b, W/b, b].
      return {{n, c * b * b, h / b, w / b}, {n, b, b, c, h / b, w / b}, {c * h * w, w, 1, h * w, b * w, b}};
    }
    const std::string mode = spec_.text("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") spec_.fail("its mode " + mode + " is neither DCR nor CRD");
    if (c % (b * b) != 0)
      spec_.fail("blocks of " + std::to_string(b) + " do not divide " + shapes::text(x) + "'s channels");
    const dim k = c / (b * b);
    const bool dcr = mode == "DCR";
    // Out [N, C/b², H, b, W, b] from in [N, b, b, C/b², H, W] (DCR) or [N, C/b², b, b, H, W] (CRD).
    const dim channel = dcr ? h * w : b * b * h * w, row = dcr ? b * k * h * w : b * h * w,
              column = dcr ? k * h * w : h * w;
    return {{n, k, h * b, w * b}, {n, k, h, b, w, b}, {c * h * w, channel, w, row, 1, column}};
  }
  dims_t strides_, walk_;  // walk_: the output's dims, or the six axes of a DepthToSpace's or SpaceToDepth's
  dim offset_ = 0;
  bool once_ = true;
};

// Tile: the input repeated along each axis.
class TileOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    dims_t out = input(in, 0).dims;
    const auto& repeats = integers(spec_, 1);
    if (repeats.size() != out.size()) spec_.fail("its repeats do not fit " + shapes::text(out));
    for (std::size_t d = 0; d < out.size(); ++d) {
      if (repeats[d] < 1) spec_.fail("repeats an axis " + std::to_string(repeats[d]) + " times");
      out[d] *= repeats[d];
    }
    return out;
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    each(in[0]->dims, out.dims, [&](std::size_t o, dim i) { out.data[o] = in[0]->data[i]; });
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    if (float* g = in[0]->grad) each(in[0]->dims, out.dims, [&](std::size_t o, dim i) { g[i] += out.grad[o]; });
  }

 private:
  template <class F>
  static void each(const dims_t& in, const dims_t& out, F&& fn) {
    const dims_t strides = shapes::strides_of(in);
    const std::size_t n = product(out);
    for (std::size_t o = 0; o < n; ++o) {
      dim i = 0, rest = static_cast<dim>(o);
      for (std::size_t d = out.size(); d-- > 0;) {
        i += (rest % out[d]) % in[d] * strides[d];
        rest /= out[d];
      }
      fn(o, i);
    }
  }
};

// Pad of any axes but the first (the batch's), in constant, reflect or edge mode (F.pad, nn.ZeroPad2d,
// nn.ReflectionPad2d, nn.ReplicationPad2d); negative pads crop. Each output element reads one input element
// or the constant: the map is worked out at set-up.
class PadOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& x = input(in, 0).dims;
    const auto& pads = integers(spec_, 1);
    if (spec_.integer_input(3)) spec_.fail("ddl takes a Pad of every axis, without axes");
    if (x.empty() || pads.size() != 2 * x.size()) spec_.fail("its pads do not fit " + shapes::text(x));
    if (pads[0] != 0 || pads[x.size()] != 0) spec_.fail("ddl pads no batch axis (the first)");
    const std::string mode = spec_.text("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge")
      spec_.fail("its mode " + mode + " is not constant, reflect or edge");
    dims_t out = x;
    for (std::size_t d = 0; d < x.size(); ++d) {
      const std::int64_t before = pads[d], after = pads[d + x.size()];
      if (std::abs(before) > (1 << 24) || std::abs(after) > (1 << 24)) spec_.fail("its pads are out of range");
      out[d] += before + after;
      if (out[d] < 1) spec_.fail("crops " + shapes::text(x) + " to nothing");
      if (mode == "reflect" && (before >= x[d] || after >= x[d]))
        spec_.fail("reflects " + std::to_string(std::max(before, after)) + " elements of an axis of " + std::to_string(x[d]));
    }
    return out;
  }
  void setup(Context&, OpInputs in, const OpValue& out, bool) override {
    const dims_t& x = in[0]->dims;
    const auto& pads = integers(spec_, 1);
    const std::string mode = spec_.text("mode", "constant");
    // Per axis, the input index each output index reads, -1 for the constant.
    std::vector<std::vector<dim>> from(x.size());
    for (std::size_t d = 0; d < x.size(); ++d)
      for (dim o = 0; o < out.dims[d]; ++o) {
        dim i = o - pads[d];
        if (mode == "reflect") i = i < 0 ? -i : i >= x[d] ? 2 * (x[d] - 1) - i : i;
        if (mode == "edge") i = std::clamp<dim>(i, 0, x[d] - 1);
        from[d].push_back(i >= 0 && i < x[d] ? i : -1);
      }
    const dims_t strides = shapes::strides_of(x);
    source_.assign(product(out.dims), 0);
    for (std::size_t o = 0; o < source_.size(); ++o) {
      dim at = 0, rest = static_cast<dim>(o);
      for (std::size_t d = x.size(); d-- > 0 && at >= 0;) {
        const dim i = from[d][rest % out.dims[d]];
        at = i < 0 ? -1 : at + i * strides[d];
        rest /= out.dims[d];
      }
      source_[o] = at;
    }
    value_ = constant_number(in, 2, 0.0f);
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    for (std::size_t o = 0; o < source_.size(); ++o) out.data[o] = source_[o] < 0 ? value_ : in[0]->data[source_[o]];
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    if (float* g = in[0]->grad)  // in order: reflected elements add into one input element from several places
      for (std::size_t o = 0; o < source_.size(); ++o)
        if (source_[o] >= 0) g[source_[o]] += out.grad[o];
  }

 private:
  std::vector<dim> source_;
  float value_ = 0;
};

// Concat along an axis, and Gather at indices known before the graph runs (of any rank): parts of the output,
// each a block of an input.
class Parts : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    if (spec_.type == "Gather") {
      const auto& index = spec_.integers.find(1);
      // Indices of any rank (nn.Unfold's [kernel, positions]) lie in the output as their flat list would.
      if (index == spec_.integers.end()) spec_.fail("its indices are not known before the graph runs");
      return shapes::gather(input(in, 0).dims, spec_.integer("axis", 0), index->second.dims);
    }
    std::vector<dims_t> all;
    for (std::size_t i = 0; i < in.size(); ++i) all.push_back(input(in, i).dims);
    return shapes::concat(all, spec_.integer("axis", 0));
  }
  void setup(Context&, OpInputs in, const OpValue& out, bool) override {
    parts_.clear();
    const dims_t& a = in[0]->dims;
    const dim axis = shapes::axis_in(spec_.integer("axis", 0), a.size());
    dims_t full = a;  // the output with a gather's dropped axis kept
    const bool gather = spec_.type == "Gather";
    const auto& indices = gather ? *spec_.integer_input(1) : std::vector<std::int64_t>();
    full[axis] = gather ? static_cast<dim>(indices.size()) : out.dims[axis];
    into_ = shapes::strides_of(full);
    dim at = 0;
    for (std::size_t q = 0; q < (gather ? indices.size() : in.size()); ++q) {
      Part p{gather ? 0 : q, in[gather ? 0 : q]->dims, 0, at * into_[axis]};
      if (gather) {
        const dim i = indices[q] < 0 ? indices[q] + a[axis] : indices[q];
        if (i < 0 || i >= a[axis]) spec_.fail("index " + std::to_string(indices[q]) + " is outside " + shapes::text(a));
        p.dims[axis] = 1;
        p.from = i * shapes::strides_of(a)[axis];
      }
      at += p.dims[axis];
      parts_.push_back(std::move(p));
    }
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    for (const Part& p : parts_) {
      const OpValue& x = *in[p.input];
      walk::in_parallel(p.dims, shapes::strides_of(x.dims), into_,
                        [&](std::size_t, dim i, dim j) { out.data[p.to + j] = x.data[p.from + i]; });
    }
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    // A gather may take an index twice; a concatenation's parts are apart.
    for (const Part& p : parts_) {
      const OpValue& x = *in[p.input];
      if (!x.grad) continue;
      const auto fn = [&](std::size_t, dim i, dim j) { x.grad[p.from + i] += out.grad[p.to + j]; };
      spec_.type == "Concat" ? walk::in_parallel(p.dims, shapes::strides_of(x.dims), into_, fn)
                             : walk::each(p.dims, shapes::strides_of(x.dims), into_, fn);
    }
  }
  bool backward_reads_input(std::size_t, const std::vector<bool>&) const override { return false; }
  bool backward_reads_output(const std::vector<bool>&) const override { return false; }

 private:
  struct Part {
    std::size_t input;
    dims_t dims;  // of the block
    dim from, to;  // offsets in the input and the output
  };
  std::vector<Part> parts_;
  dims_t into_;
};

// Gather at indices computed on the images (a codebook's entries at each vector's nearest, from an ArgMin): the
// indices are a value of whole numbers held as floats, read when the graph runs; they take no gradient.
class GatherAt : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    return shapes::gather(input(in, 0).dims, spec_.integer("axis", 0), input(in, 1).dims);
  }
  void setup(Context&, OpInputs in, const OpValue&, bool) override {
    const dims_t& a = in[0]->dims;
    const dim axis = shapes::axis_in(spec_.integer("axis", 0), a.size());
    outer_ = shapes::count(dims_t(a.begin(), a.begin() + axis));
    along_ = a[axis];
    inner_ = shapes::count(dims_t(a.begin() + axis + 1, a.end()));
    count_ = shapes::count(in[1]->dims);
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const std::vector<dim> rows = indices(*in[1]);
#pragma omp parallel for
    for (dim o = 0; o < outer_; ++o)
      for (dim q = 0; q < count_; ++q)
        std::copy_n(in[0]->data + (o * along_ + rows[q]) * inner_, inner_, out.data + (o * count_ + q) * inner_);
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    if (!in[0]->grad) return;
    const std::vector<dim> rows = indices(*in[1]);
    // An index may come twice: each row of the outer axes adds its own rows in order.
#pragma omp parallel for
    for (dim o = 0; o < outer_; ++o)
      for (dim q = 0; q < count_; ++q) {
        float* g = in[0]->grad + (o * along_ + rows[q]) * inner_;
        const float* dy = out.grad + (o * count_ + q) * inner_;
        for (dim i = 0; i < inner_; ++i) g[i] += dy[i];
      }
  }
  bool backward_reads_input(std::size_t i, const std::vector<bool>&) const override { return i == 1; }
  bool backward_reads_output(const std::vector<bool>&) const override { return false; }

 private:
  // The indices as rows along the axis, negative ones from its end; one out of range is named.
  std::vector<dim> indices(const OpValue& index) const {
    std::vector<dim> rows(static_cast<std::size_t>(count_));
    for (dim q = 0; q < count_; ++q) {
      const float given = index.data[q];
      const dim i = std::abs(given) < 1e15f ? static_cast<dim>(std::nearbyint(given)) : -along_ - 1;  // NaN too
      rows[q] = i < 0 ? i + along_ : i;
      if (rows[q] < 0 || rows[q] >= along_)
        spec_.fail("index " + std::to_string(given) + " is outside an axis of " + std::to_string(along_));
    }
    return rows;
  }
  dim outer_ = 1, along_ = 1, inner_ = 1, count_ = 0;
};

// Gather's indices known before the graph runs are parts; computed ones are read as the graph runs.
std::unique_ptr<Operator> make_gather(OpSpec spec) {
  if (spec.integers.count(1)) return make<Parts>(std::move(spec));
  return make<GatherAt>(std::move(spec));
}

// ScatterND without reduction: the data with the slices that the indices (known before the graph runs) name
// replaced by the updates (swin_t's attention mask, made of slices assigned in a tensor of zeros). Where two
// indices name one element the last one wins, and takes its gradient. Each output element's source is worked
// out at set-up.
class ScatterOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& data = input(in, 0).dims;
    if (spec_.text("reduction", "none") != "none") spec_.fail("ddl scatters without reduction");
    const auto index = spec_.integers.find(1);
    if (index == spec_.integers.end()) spec_.fail("its indices are not integers known before the graph runs");
    const dims_t& at = index->second.dims;
    if (at.empty() || at.back() > static_cast<dim>(data.size()))
      spec_.fail("its indices " + shapes::text(at) + " do not index data " + shapes::text(data));
    dims_t updates(at.begin(), at.end() - 1);
    updates.insert(updates.end(), data.begin() + at.back(), data.end());
    if (input(in, 2).dims != updates)
      spec_.fail("its updates " + shapes::text(in[2]->dims) + " are not the " + shapes::text(updates) + " its indices take");
    return data;
  }
  void setup(Context&, OpInputs in, const OpValue& out, bool) override {
    const dims_t& data = in[0]->dims;
    const IntegerInput& index = spec_.integers.at(1);
    const std::size_t depth = index.dims.back(), tuples = product(dims_t(index.dims.begin(), index.dims.end() - 1));
    const dims_t strides = shapes::strides_of(data);
    const std::size_t block = product(dims_t(data.begin() + depth, data.end()));
    writer_.assign(product(out.dims), -1);
    for (std::size_t t = 0; t < tuples; ++t) {
      dim at = 0;
      for (std::size_t d = 0; d < depth; ++d) {
        const dim i = index.values[t * depth + d], length = data[d];
        if (i < -length || i >= length) spec_.fail("index " + std::to_string(i) + " is outside " + shapes::text(data));
        at += (i < 0 ? i + length : i) * strides[d];
      }
      for (std::size_t k = 0; k < block; ++k) writer_[at + k] = static_cast<dim>(t * block + k);
    }
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    for (std::size_t o = 0; o < writer_.size(); ++o) out.data[o] = writer_[o] < 0 ? in[0]->data[o] : in[2]->data[writer_[o]];
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    float *data = in[0]->grad, *updates = in[2]->grad;
    for (std::size_t o = 0; o < writer_.size(); ++o)
      if (writer_[o] < 0 && data) data[o] += out.grad[o];
      else if (writer_[o] >= 0 && updates) updates[writer_[o]] += out.grad[o];
  }

 private:
  std::vector<dim> writer_;  // by output element: the update element written there, -1 for the data's own
};

// Trilu: the upper (upper 1, ONNX's default) or lower triangle of the last two axes from the k-th diagonal
// (torch.triu, torch.tril), the other elements 0; the gradient passes to the elements kept. k is an integer
// known before the graph runs, 0 where left out.
class TriluOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& x = input(in, 0).dims;
    if (x.size() < 2) spec_.fail("ddl takes the triangles of a tensor of rank 2 or more, not " + shapes::text(x));
    diagonal(in);
    return x;
  }
  void setup(Context&, OpInputs in, const OpValue& out, bool) override {
    k_ = diagonal(in);
    upper_ = spec_.integer("upper", 1) != 0;
    rows_ = out.dims[out.dims.size() - 2];
    cols_ = out.dims.back();
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const float* x = in[0]->data;
    const std::size_t n = product(out.dims);
#pragma omp parallel for if (n >= walk::kParallelFrom)
    for (std::size_t o = 0; o < n; ++o) out.data[o] = kept(o) ? x[o] : 0.0f;
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    float* g = in[0]->grad;
    if (!g) return;
    const std::size_t n = product(out.dims);
#pragma omp parallel for if (n >= walk::kParallelFrom)
    for (std::size_t o = 0; o < n; ++o)
      if (kept(o)) g[o] += out.grad[o];
  }

 private:
  std::int64_t diagonal(OpInputs in) const {
    if (in.size() > 1 && in[1]) spec_.fail("its k is not an integer known before the graph runs");
    const auto* k = spec_.integer_input(1);
    if (!k) return 0;
    if (k->size() != 1 || follows_batch(k->front()))
      spec_.fail("its k is not one integer that does not follow the batch");
    return k->front();
  }
  // Whether element o (row i, column j of its matrix) is in the triangle.
  bool kept(std::size_t o) const {
    const dim j = static_cast<dim>(o) % cols_, i = static_cast<dim>(o) / cols_ % rows_;
    return upper_ ? j - i >= k_ : j - i <= k_;
  }
  std::int64_t k_ = 0;
  bool upper_ = true;
  dim rows_ = 1, cols_ = 1;
};

const OperatorRecord kShapeOpsRecords[] = {
    {"Identity", "shape and indexing", make<SameNumbers>, ""},
    {"Cast", "shape and indexing", make<CastOp>,
     "to float or double as it is; to bool, 1 where not 0; to an integer, toward zero; no gradient through the last "
     "two"},
    {"Dropout", "shape and indexing", make<DropoutOp>,
     "a fresh mask each step from ddl's seeded generator; training_mode as the node gives it"},
    {"Reshape", "shape and indexing", make<SameNumbers>,
     "its shape known before the graph runs (a multiple of the batch is kept as one)"},
    {"Flatten", "shape and indexing", make<SameNumbers>, ""},
    {"Squeeze", "shape and indexing", make<SameNumbers>, "without axes, the batch axis stays"},
    {"Unsqueeze", "shape and indexing", make<SameNumbers>, ""},
    {"Transpose", "shape and indexing", make<Strided>, ""},
    {"DepthToSpace", "shape and indexing", make<Strided>, "[N, C, H, W]; mode DCR or CRD (nn.PixelShuffle)"},
    {"SpaceToDepth", "shape and indexing", make<Strided>, "[N, C, H, W]"},
    {"Expand", "shape and indexing", make<Strided>, ""},
    {"Slice", "shape and indexing", make<Strided>, "bounds, axes and steps (either sign) that do not follow the batch"},
    {"Tile", "shape and indexing", make<TileOp>, ""},
    {"Pad", "shape and indexing", make<PadOp>,
     "constant, reflect or edge, of any axes but the batch's; negative pads crop"},
    {"Concat", "shape and indexing", make<Parts>, "any axis"},
    {"Gather", "shape and indexing", make_gather,
     "indices known before the graph runs or computed; no gradient to them"},
    {"ScatterND", "shape and indexing", make<ScatterOp>, "indices known before the graph runs; no reduction"},
    {"Trilu", "shape and indexing", make<TriluOp>, "on the last two axes; k known before the graph runs"},
};

}  // namespace

std::span<const OperatorRecord> shape_operators() { return kShapeOpsRecords; }

}  // namespace ddl
