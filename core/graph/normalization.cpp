// The normalisation family: BatchNormalization where a piece holds one, LayerNormalization (on oneDNN's layer
// normalization) over the axes from `axis` on, GroupNormalization and InstanceNormalization.
#include <cmath>
#include <optional>

#include "core/graph/operator_registry.hpp"
#include "core/graph/tensor_walk.hpp"

namespace ddl {
namespace {

using walk::dim;

class LayerNormOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& x = input(in, 0).dims;
    const std::size_t features = features_of(x);
    if (product(input(in, 1).dims) != features || (in.size() > 2 && in[2] && product(in[2]->dims) != features))
      spec_.fail("its scale " + shapes::text(in[1]->dims) + " and shift do not fit " + shapes::text(x));
    return x;
  }
  void setup(Context& ctx, OpInputs in, const OpValue& out, bool train) override {
    const dim features = static_cast<dim>(features_of(out.dims));
    data_ = walk::plain({static_cast<dim>(product(out.dims)) / features, features});
    vector_ = walk::plain({features});
    const auto& engine = ctx.engine();
    const auto prop = train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    const float epsilon = spec_.real("epsilon", 1e-5f);
    const auto fwd = make_normalization_forward_pd<dnnl::layer_normalization_forward>(engine, prop, data_, epsilon, flags);
    forward_ = dnnl::layer_normalization_forward(fwd);
    mean_ = Tensor(fwd.mean_desc(), engine);
    variance_ = Tensor(fwd.variance_desc(), engine);
    // Without a shift it shifts by zeros.
    zeros_.assign(in.size() > 2 && in[2] ? 0 : features, 0.0f);
    if (!train) return;
    backward_ = dnnl::layer_normalization_backward(make_normalization_backward_pd<dnnl::layer_normalization_backward>(
        engine, dnnl::prop_kind::backward, data_, data_, epsilon, flags, fwd));
    diff_scale_ = Tensor(vector_, engine);
    diff_shift_ = Tensor(vector_, engine);
  }
  void forward(Context& ctx, OpInputs in, OpValue& out) override {
    forward_.execute(ctx.stream(), {{DNNL_ARG_SRC, walk::over(data_, ctx, in[0]->data)},
                                    {DNNL_ARG_SCALE, walk::over(vector_, ctx, in[1]->data)},
                                    {DNNL_ARG_SHIFT, walk::over(vector_, ctx, shift(in))},
                                    {DNNL_ARG_MEAN, mean_.memory()},
                                    {DNNL_ARG_VARIANCE, variance_.memory()},
                                    {DNNL_ARG_DST, walk::over(data_, ctx, out.data)}});
  }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) override {
    // oneDNN writes the three gradients; they are added where other operations' are.
    backward_->execute(ctx.stream(), {{DNNL_ARG_SRC, walk::over(data_, ctx, in[0]->data)},
                                      {DNNL_ARG_DIFF_DST, walk::over(data_, ctx, out.grad)},
                                      {DNNL_ARG_SCALE, walk::over(vector_, ctx, in[1]->data)},
                                      {DNNL_ARG_SHIFT, walk::over(vector_, ctx, shift(in))},
                                      {DNNL_ARG_MEAN, mean_.memory()},
                                      {DNNL_ARG_VARIANCE, variance_.memory()},
                                      {DNNL_ARG_DIFF_SRC, walk::over(data_, ctx, scratch)},
                                      {DNNL_ARG_DIFF_SCALE, diff_scale_.memory()},
                                      {DNNL_ARG_DIFF_SHIFT, diff_shift_.memory()}});
    walk::add_into(in[0]->grad, scratch, product(out.dims));
    walk::add_into(in[1]->grad, diff_scale_.data(), product(in[1]->dims));
    if (in.size() > 2 && in[2]) walk::add_into(in[2]->grad, diff_shift_.data(), product(in[2]->dims));
  }
  bool backward_reads_output(const std::vector<bool>&) const override { return false; }

 private:
  std::size_t features_of(const dims_t& x) const {
    const dim axis = shapes::axis_in(spec_.integer("axis", -1), x.size());
    return product(dims_t(x.begin() + axis, x.end()));
  }
  const float* shift(OpInputs in) const { return in.size() > 2 && in[2] ? in[2]->data : zeros_.data(); }
  dnnl::memory::desc data_, vector_;  // x as [rows, features]; scale and shift
  dnnl::layer_normalization_forward forward_;
  std::optional<dnnl::layer_normalization_backward> backward_;
  Tensor mean_, variance_, diff_scale_, diff_shift_;
  std::vector<float> zeros_;
};

// Each [N, C, ...] image's channels in groups, each group normalised over its channels and other axes, then
// scaled and shifted per channel: GroupNormalization (num_groups; PyTorch's GroupNorm export is fused into one,
// fuse_patterns.hpp) and InstanceNormalization (a group a channel).
class GroupNormOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& x = input(in, 0).dims;
    if (x.size() < 3) spec_.fail("ddl normalises [N, C, ...] of rank 3 or more, not " + shapes::text(x));
    if (product(input(in, 1).dims) != static_cast<std::size_t>(x[1]) || product(input(in, 2).dims) != static_cast<std::size_t>(x[1]))
      spec_.fail("its scale and shift do not hold one number a channel of " + shapes::text(x));
    if (groups(x) < 1 || x[1] % groups(x) != 0)
      spec_.fail(std::to_string(groups(x)) + " groups do not divide the " + std::to_string(x[1]) + " channels");
    return x;
  }
  void setup(Context&, OpInputs, const OpValue& out, bool) override {
    channels_ = out.dims[1];
    plane_ = static_cast<dim>(product(out.dims)) / (out.dims[0] * channels_);
    per_group_ = channels_ / groups(out.dims);
    mean_.assign(out.dims[0] * groups(out.dims), 0.0f);
    rstd_.assign(mean_.size(), 0.0f);
  }
  // Each row (an image's group) on one thread, its sums in double, vectorised (omp simd: the order is the
  // baseline build's, the same on every CPU); each channel's run of the row scaled and shifted as x * a + b.
  void forward(Context&, OpInputs in, OpValue& out) override {
    const float epsilon = spec_.real("epsilon", 1e-5f);
    const float *x = in[0]->data, *scale = in[1]->data, *shift = in[2]->data;
    const dim rows = static_cast<dim>(mean_.size()), length = per_group_ * plane_;
#pragma omp parallel for if (rows * length >= static_cast<dim>(walk::kParallelFrom))
    for (dim r = 0; r < rows; ++r) {
      const float* xr = x + r * length;
      double sum = 0, squares = 0;
#pragma omp simd reduction(+ : sum)
      for (dim k = 0; k < length; ++k) sum += xr[k];
      const double mean = sum / static_cast<double>(length);
#pragma omp simd reduction(+ : squares)
      for (dim k = 0; k < length; ++k) squares += (xr[k] - mean) * (xr[k] - mean);
      mean_[r] = static_cast<float>(mean);
      rstd_[r] = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(length) + epsilon));
      for (dim j = 0; j < per_group_; ++j) {
        const dim c = channel(r, j * plane_), at = r * length + j * plane_;
        const float a = scale[c] * rstd_[r], b = shift[c] - mean_[r] * a;
#pragma omp simd
        for (dim k = 0; k < plane_; ++k) out.data[at + k] = x[at + k] * a + b;
      }
    }
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    const float *x = in[0]->data, *scale = in[1]->data, *gy = out.grad;
    float* gx = in[0]->grad;
    const dim rows = static_cast<dim>(mean_.size()), length = per_group_ * plane_;
    // By image and channel, summed in double over the channel's run of the row: the gradient, and the gradient
    // times the normalised input. The rows are the threads'; the parameters' sums over images come after.
    sums_.assign(2 * rows * per_group_, 0.0);
    double* sum_g = sums_.data();
    double* sum_gx = sum_g + rows * per_group_;
#pragma omp parallel for if (rows * length >= static_cast<dim>(walk::kParallelFrom))
    for (dim r = 0; r < rows; ++r) {
      const double mean = mean_[r], rstd = rstd_[r];
      double row_g = 0, row_gx = 0;  // of the gradient times the scale, and of that times the normalised input
      for (dim j = 0; j < per_group_; ++j) {
        const dim c = channel(r, j * plane_), at = r * length + j * plane_, k0 = r * per_group_ + j;
        double g = 0, g_times_x = 0;
#pragma omp simd reduction(+ : g, g_times_x)
        for (dim k = 0; k < plane_; ++k) {
          g += gy[at + k];
          g_times_x += static_cast<double>(gy[at + k]) * x[at + k];
        }
        sum_g[k0] = g;
        sum_gx[k0] = (g_times_x - mean * g) * rstd;
        row_g += sum_g[k0] * scale[c];
        row_gx += sum_gx[k0] * scale[c];
      }
      if (!gx) continue;
      // gx = rstd (gy scale - mean_g - normal mean_gx), normal = (x - mean) rstd: gy * a + x * b + c.
      const double mean_g = row_g / static_cast<double>(length), mean_gx = row_gx / static_cast<double>(length);
      const float b = static_cast<float>(-rstd * rstd * mean_gx);
      for (dim j = 0; j < per_group_; ++j) {
        const dim ch = channel(r, j * plane_), at = r * length + j * plane_;
        const float a = static_cast<float>(rstd * scale[ch]);
        const float c = static_cast<float>(rstd * (mean * rstd * mean_gx - mean_g));
#pragma omp simd
        for (dim k = 0; k < plane_; ++k) gx[at + k] += gy[at + k] * a + x[at + k] * b + c;
      }
    }
    for (dim r = 0; r < rows; ++r)
      for (dim j = 0; j < per_group_; ++j) {
        const dim c = channel(r, j * plane_), k0 = r * per_group_ + j;
        if (in[1]->grad) in[1]->grad[c] += static_cast<float>(sum_gx[k0]);
        if (in[2]->grad) in[2]->grad[c] += static_cast<float>(sum_g[k0]);
      }
  }

 private:
  dim groups(const dims_t& x) const {
    return spec_.type == "InstanceNormalization" ? x[1] : spec_.integer("num_groups", 0);
  }
  // The channel of element k of row r (an image's group).
  dim channel(dim r, dim k) const { return r % (channels_ / per_group_) * per_group_ + k / plane_; }
  dim channels_ = 1, plane_ = 1, per_group_ = 1;
  std::vector<float> mean_, rstd_;  // by image and group
  std::vector<double> sums_;        // backward's, by image and channel
};

// BatchNormalization over [N, C, ...] (BatchNorm1d on [N, C] and [N, C, L], BatchNorm2d): in training each
// channel normalised by the batch's statistics, which move the running mean and variance (inputs 3 and 4, which
// the graph layer keeps as state) by 1 - momentum, the variance unbiased as PyTorch's; in evaluation by the
// running statistics.
class BatchNormOp : public Operator {
 public:
  using Operator::Operator;
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t& x = input(in, 0).dims;
    if (x.size() < 2) spec_.fail("ddl normalises [N, C, ...], not " + shapes::text(x));
    for (std::size_t i = 1; i < 5; ++i)
      if (product(input(in, i).dims) != static_cast<std::size_t>(x[1]))
        spec_.fail("its scale, bias, mean and variance do not hold one number a channel of " + shapes::text(x));
    return x;
  }
  void setup(Context&, OpInputs, const OpValue& out, bool train) override {
    train_ = train;
    images_ = out.dims[0];
    channels_ = out.dims[1];
    length_ = static_cast<dim>(product(out.dims)) / (images_ * channels_);
    mean_.assign(channels_, 0.0f);
    rstd_.assign(channels_, 0.0f);
  }
  void forward(Context&, OpInputs in, OpValue& out) override {
    const float epsilon = spec_.real("epsilon", 1e-5f), momentum = spec_.real("momentum", 0.9f);
    const float *x = in[0]->data, *scale = in[1]->data, *shift = in[2]->data;
    float *running_mean = in[3]->data, *running_var = in[4]->data;
    const double count = static_cast<double>(images_ * length_);
#pragma omp parallel for if (images_ * channels_ * length_ >= static_cast<dim>(walk::kParallelFrom))
    for (dim c = 0; c < channels_; ++c) {
      double mean = running_mean[c], variance = running_var[c];
      if (train_) {
        double sum = 0, squares = 0;
        for_channel(c, [&](dim i) { sum += x[i]; });
        mean = sum / count;
        for_channel(c, [&](dim i) { squares += (x[i] - mean) * (x[i] - mean); });
        variance = squares / count;
        running_mean[c] = static_cast<float>(momentum * running_mean[c] + (1 - momentum) * mean);
        const double unbiased = count > 1 ? variance * count / (count - 1) : variance;
        running_var[c] = static_cast<float>(momentum * running_var[c] + (1 - momentum) * unbiased);
      }
      mean_[c] = static_cast<float>(mean);
      rstd_[c] = static_cast<float>(1.0 / std::sqrt(variance + epsilon));
      for_channel(c, [&](dim i) { out.data[i] = scale[c] * (x[i] - mean_[c]) * rstd_[c] + shift[c]; });
    }
  }
  void backward(Context&, OpInputs in, const OpValue& out, float*) override {
    const float *x = in[0]->data, *scale = in[1]->data, *gy = out.grad;
    float *gx = in[0]->grad, *gscale = in[1]->grad, *gshift = in[2]->grad;
    const double count = static_cast<double>(images_ * length_);
#pragma omp parallel for if (images_ * channels_ * length_ >= static_cast<dim>(walk::kParallelFrom))
    for (dim c = 0; c < channels_; ++c) {
      double sum_g = 0, sum_gx = 0;  // of the gradient, and of the gradient times the normalised input
      for_channel(c, [&](dim i) {
        sum_g += gy[i];
        sum_gx += gy[i] * (x[i] - mean_[c]) * rstd_[c];
      });
      if (gscale) gscale[c] += static_cast<float>(sum_gx);
      if (gshift) gshift[c] += static_cast<float>(sum_g);
      if (!gx) continue;
      const float mean_g = static_cast<float>(sum_g / count), mean_gx = static_cast<float>(sum_gx / count);
      for_channel(c, [&](dim i) {
        gx[i] += scale[c] * rstd_[c] * (gy[i] - mean_g - (x[i] - mean_[c]) * rstd_[c] * mean_gx);
      });
    }
  }

 private:
  // fn(i) for the offset i of each of channel c's elements.
  template <class F>
  void for_channel(dim c, F fn) const {
    for (dim n = 0; n < images_; ++n)
      for (dim k = 0, at = (n * channels_ + c) * length_; k < length_; ++k) fn(at + k);
  }
  bool train_ = false;
  dim images_ = 1, channels_ = 1, length_ = 1;
  std::vector<float> mean_, rstd_;  // by channel: the statistics this step normalised by
};

const OperatorRecord kNormalizationRecords[] = {
    {"BatchNormalization", "normalisation", make<BatchNormOp>, "[N, C, ...]; a chain's is ddl's BatchNorm2d layer on oneDNN"},
    {"LayerNormalization", "normalisation", make<LayerNormOp>, "any axis; the shift may be left out"},
    {"InstanceNormalization", "normalisation", make<GroupNormOp>, "[N, C, ...] of rank 3 or more"},
    {"GroupNormalization", "normalisation", make<GroupNormOp>, "per-channel scale and bias (ONNX 21's); PyTorch's GroupNorm export is fused into one"},
};

}  // namespace

std::span<const OperatorRecord> normalization_operators() { return kNormalizationRecords; }

}  // namespace ddl
