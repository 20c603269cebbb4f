#include "core/layers/linear.hpp"

#include <algorithm>

#include "core/bf16.hpp"
#include "core/error.hpp"

namespace ddl {

using memory = dnnl::memory;

Linear::Linear(const LinearOptions& options) : opt_(options) {
  if (opt_.in_features <= 0 || opt_.out_features <= 0) throw InputError("linear: feature counts must be positive");
}

std::string Linear::describe() const {
  return "linear " + std::to_string(opt_.in_features) + "->" + std::to_string(opt_.out_features);
}

std::vector<ParamSpec> Linear::param_specs() const {
  std::vector<ParamSpec> specs{{"weight",
                                {opt_.out_features, opt_.in_features},
                                opt_.init,
                                static_cast<std::size_t>(opt_.in_features),
                                static_cast<std::size_t>(opt_.out_features)}};
  if (opt_.bias) specs.push_back({"bias", {opt_.out_features}, Init::zeros});
  return specs;
}

void Linear::bind(const std::vector<ParamView>& views, Context& ctx) {
  const memory::dim in = opt_.in_features, out = opt_.out_features;
  weights_t_ = ParamMemory(views[0], memory::desc({in, out}, dt::f32, dims_t{1, in}), ctx.engine());
  if (opt_.bias) bias_ = ParamMemory(views[1], memory::desc({1, out}, dt::f32, tag::ab), ctx.engine());
}

// The bias gradient: dY summed over rows. Columns are split between threads, rows run in order, so the
// sum is the same whatever the thread count.
void Linear::sum_rows(const Tensor& diff_dst, float* out) const {
  const std::size_t rows = dims_of(out_rows_md_)[0], cols = opt_.out_features;
  auto sum = [&](const auto* dy, auto to_float) {
#pragma omp parallel for
    for (std::size_t c0 = 0; c0 < cols; c0 += 64) {
      const std::size_t c1 = std::min(cols, c0 + 64);
      for (std::size_t c = c0; c < c1; ++c) out[c] = 0.0f;
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = c0; c < c1; ++c) out[c] += to_float(dy[r * cols + c]);
    }
  };
  const void* dy = diff_dst.memory().get_data_handle();
  if (diff_dst.data_type() == DataType::bf16)
    sum(static_cast<const std::uint16_t*>(dy), from_bf16);
  else
    sum(static_cast<const float*>(dy), [](float v) { return v; });
}

memory::desc Linear::setup(Context& ctx, const memory::desc& src_md, Mode mode, bool need_diff_src) {
  const dims_t in = dims_of(src_md);
  if (in.size() < 2 || in.back() != opt_.in_features)
    throw InputError(describe() + ": expects input [..., " + std::to_string(opt_.in_features) + "], got " +
                     to_string(in));
  mode_ = mode;
  need_diff_src_ = mode == Mode::train && need_diff_src;
  const memory::dim rows = static_cast<memory::dim>(product(in)) / in.back();
  // A bf16 input (between bf16 layers) is taken as it is, and the output given in the type asked for.
  const dt src_type = data_type_of(src_md);
  rows_md_ = plain_desc({rows, opt_.in_features}, src_type);
  out_rows_md_ = plain_desc({rows, opt_.out_features}, output_type_);
  to_plain_ = Relayout(ctx, src_md, plain_desc(in, src_type));
  matmul_ = BatchedMatmul(ctx, rows_md_, weights_t_.value.get_desc(), out_rows_md_, 1.0f, mode == Mode::train,
                          opt_.bias ? bias_.value.get_desc() : memory::desc());
  dims_t out = in;
  out.back() = opt_.out_features;
  reset_output(ctx, plain_desc(out, output_type_));
  if (need_diff_src_) {
    diff_src_.reset(plain_desc(in, src_type));
    diff_to_src_layout_ = Relayout(ctx, plain_desc(in, src_type), src_md);
  }
  return output_.desc();
}

const Tensor& Linear::forward(Context& ctx, const Tensor& src) {
  src_ = &to_plain_(ctx, src);
  const memory x(rows_md_, ctx.engine(), src_->memory().get_data_handle());
  Tensor& dst = output_.get(ctx);
  const memory y(out_rows_md_, ctx.engine(), dst.memory().get_data_handle());
  matmul_.forward(ctx, x, weights_t_.value, y, opt_.bias ? bias_.value : memory());
  return dst;
}

const Tensor& Linear::backward(Context& ctx, const Tensor& diff_dst) {
  if (mode_ != Mode::train) throw Error(describe() + ": backward called on a layer set up for inference");
  const memory x(rows_md_, ctx.engine(), src_->memory().get_data_handle());
  const memory dy(out_rows_md_, ctx.engine(), diff_dst.memory().get_data_handle());
  const memory dx =
      need_diff_src_ ? memory(rows_md_, ctx.engine(), diff_src_.get(ctx).memory().get_data_handle()) : memory();
  matmul_.backward(ctx, x, weights_t_.value, dy, dx, weights_t_.grad);
  if (opt_.bias) sum_rows(diff_dst, static_cast<float*>(bias_.grad.get_data_handle()));
  return need_diff_src_ ? diff_to_src_layout_(ctx, diff_src_.get(ctx)) : diff_src_.current();
}

}  // namespace ddl
