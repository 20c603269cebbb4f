// The resampling family: Resize (and Upsample, its older form) of [N, C, ...] images, nearest or linear
// along each spatial axis, by scales or by sizes, with the coordinate transformations PyTorch writes
// (asymmetric for nearest, half_pixel and pytorch_half_pixel for align_corners=False, align_corners). Each
// output element reads at most two input elements an axis, with weights found once at set-up.
#include <cmath>

#include "core/graph/operator_registry.hpp"
#include "core/graph/tensor_walk.hpp"

namespace ddl {
namespace {

using walk::dim;

class ResizeOp : public Operator {
 public:
  explicit ResizeOp(OpSpec spec) : Operator(std::move(spec)) {
    mode_ = spec_.text("mode", "nearest");
    transform_ = spec_.text("coordinate_transformation_mode", spec_.type == "Upsample" ? "asymmetric" : "half_pixel");
    nearest_ = spec_.text("nearest_mode", "round_prefer_floor");
    if (mode_ != "nearest" && mode_ != "linear") spec_.fail("ddl resizes by nearest or linear, not " + mode_);
    if (transform_ != "asymmetric" && transform_ != "half_pixel" && transform_ != "pytorch_half_pixel" &&
        transform_ != "align_corners")
      spec_.fail("ddl takes coordinate_transformation_mode asymmetric, half_pixel, pytorch_half_pixel or "
                 "align_corners, not " + transform_);
    if (nearest_ != "floor" && nearest_ != "round_prefer_floor" && nearest_ != "round_prefer_ceil" && nearest_ != "ceil")
      spec_.fail("its nearest_mode " + nearest_ + " is not ONNX's");
  }
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& x = input(in, 0).dims;
    if (x.size() < 3) spec_.fail("ddl resizes [N, C, ...] of rank 3 or more, not " + shapes::text(x));
    const Target t = target(in);
    dims_t out = x;
    for (std::size_t d = 0; d < x.size(); ++d) {
      if (d < 2 && t.scales[d] != 1.0) spec_.fail("ddl resizes the spatial axes only");
      out[d] = t.sizes.empty() ? static_cast<dim>(std::floor(static_cast<double>(x[d]) * t.scales[d])) : t.sizes[d];
      if (out[d] < 1) spec_.fail("resizes " + shapes::text(x) + " to nothing");
    }
    return out;
  }
  void setup(Context&, OpInputs in, const OpValue& out, bool) override {
    const Target t = target(in);
    axes_.clear();
    for (std::size_t d = 2; d < out.dims.size(); ++d) axes_.push_back(taps(in[0]->dims[d], out.dims[d], t.scales[d]));
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    std::fill(out.data, out.data + product(out.dims), 0.0f);
    each(in[0]->dims, out.dims, [&](std::size_t o, std::size_t i, float w) { out.data[o] += w * in[0]->data[i]; });
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    if (float* g = in[0]->grad) each(in[0]->dims, out.dims, [&](std::size_t o, std::size_t i, float w) { g[i] += w * out.grad[o]; });
  }

 private:
  // Where an output index reads along one axis: two input indices and their weights.
  struct Tap {
    dim at[2];
    float weight[2];
  };
  // The scales by axis and, where given (input 3), the sizes, whose ratio to the input's are then the scales.
  struct Target {
    std::vector<double> scales;
    dims_t sizes;
  };
  Target target(OpInputs in) const {
    const dims_t& x = input(in, 0).dims;
    if (const auto* sizes = spec_.integer_input(3)) {
      if (sizes->size() != x.size()) spec_.fail("its sizes do not fit " + shapes::text(x));
      Target t{{}, *sizes};
      // F.interpolate(x, size=...) gives Concat(Shape(x)[:2], [H, W]): its batch is the one that runs.
      if (t.sizes[0] == kBatchTimes) t.sizes[0] = x[0];
      for (std::size_t d = 0; d < x.size(); ++d) t.scales.push_back(static_cast<double>(t.sizes[d]) / static_cast<double>(x[d]));
      return t;
    }
    const std::size_t at = spec_.type == "Upsample" ? 1 : 2;  // Upsample's scales are its input 2
    if (at >= in.size() || !in[at] || !in[at]->constant || product(in[at]->dims) != x.size())
      spec_.fail("ddl resizes by constant scales, one an axis, or by sizes known before the graph runs");
    return {std::vector<double>(in[at]->data, in[at]->data + x.size()), {}};
  }
  std::vector<Tap> taps(dim in, dim out, double scale) const {
    std::vector<Tap> taps;
    for (dim o = 0; o < out; ++o) {
      double x = transform_ == "asymmetric" ? o / scale
                 : transform_ == "align_corners" ? (out > 1 ? o * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0)
                 : transform_ == "pytorch_half_pixel" && out == 1 ? 0.0
                                                                  : (o + 0.5) / scale - 0.5;
      if (mode_ == "nearest") {
        const double n = nearest_ == "floor" ? std::floor(x)
                         : nearest_ == "ceil" ? std::ceil(x)
                         : nearest_ == "round_prefer_ceil" ? std::floor(x + 0.5)
                                                           : std::ceil(x - 0.5);
        const dim i = std::clamp<dim>(static_cast<dim>(n), 0, in - 1);
        taps.push_back({{i, i}, {1.0f, 0.0f}});
        continue;
      }
      x = std::clamp(x, 0.0, static_cast<double>(in - 1));  // PyTorch clamps what falls before the first element
      const dim i0 = static_cast<dim>(std::floor(x)), i1 = std::min<dim>(i0 + 1, in - 1);
      const float w1 = static_cast<float>(x - static_cast<double>(i0));
      taps.push_back({{i0, i1}, {1.0f - w1, w1}});
    }
    return taps;
  }
  // fn(o, i, w) for each output element o and each input element i it reads, with weight w.
  template <class F>
  void each(const dims_t& in, const dims_t& out, F&& fn) const {
    if (axes_.size() == 2) return each_of_planes(in, out, fn);
    const std::size_t spatial = axes_.size(), corners = std::size_t{1} << spatial;
    const dims_t in_strides = shapes::strides_of(in);
    const dim images = in[0] * in[1], in_size = static_cast<dim>(product(in)) / images,
              out_size = static_cast<dim>(product(out)) / images;
#pragma omp parallel for if (product(out) >= walk::kParallelFrom)
    for (dim image = 0; image < images; ++image) {
      dims_t at(spatial, 0);
      for (dim k = 0; k < out_size; ++k) {
        for (std::size_t c = 0; c < corners; ++c) {
          float w = 1.0f;
          dim i = 0;
          for (std::size_t d = 0; d < spatial; ++d) {
            const Tap& t = axes_[d][at[d]];
            const int side = (c >> d) & 1;
            w *= t.weight[side];
            i += t.at[side] * in_strides[2 + d];
          }
          if (w != 0.0f) fn(static_cast<std::size_t>(image * out_size + k), static_cast<std::size_t>(image * in_size + i), w);
        }
        for (std::size_t d = spatial; d-- > 0;) {
          if (++at[d] < out[2 + d]) break;
          at[d] = 0;
        }
      }
    }
  }
  // `each` for images of two spatial axes, the common case, without the general walk's counters: the same
  // calls in the same order (the four corners, the row's side first), so the same sums.
  template <class F>
  void each_of_planes(const dims_t& in, const dims_t& out, F&& fn) const {
    const dim images = in[0] * in[1], in_plane = in[2] * in[3], out_plane = out[2] * out[3];
#pragma omp parallel for if (product(out) >= walk::kParallelFrom)
    for (dim image = 0; image < images; ++image)
      for (dim oy = 0; oy < out[2]; ++oy) {
        const Tap& ty = axes_[0][oy];
        for (dim ox = 0; ox < out[3]; ++ox) {
          const Tap& tx = axes_[1][ox];
          const auto o = static_cast<std::size_t>(image * out_plane + oy * out[3] + ox);
          for (int c = 0; c < 4; ++c) {
            const float w = 1.0f * ty.weight[c & 1] * tx.weight[c >> 1];
            if (w != 0.0f) fn(o, static_cast<std::size_t>(image * in_plane + ty.at[c & 1] * in[3] + tx.at[c >> 1]), w);
          }
        }
      }
  }
  std::string mode_, transform_, nearest_;
  std::vector<std::vector<Tap>> axes_;  // by spatial axis, by output index
};

const OperatorRecord kResamplingRecords[] = {
    {"Resize", "resampling", make<ResizeOp>,
     "nearest or linear; asymmetric, half_pixel, pytorch_half_pixel or align_corners; constant scales or sizes"},
    {"Upsample", "resampling", make<ResizeOp>, "nearest or linear, constant scales"},
};

}  // namespace

std::span<const OperatorRecord> resampling_operators() { return kResamplingRecords; }

}  // namespace ddl
