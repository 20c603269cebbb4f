#include "core/layers/matmul_product.hpp"

#include <string>

#include "core/onednn_api.hpp"

namespace ddl {

MatmulProduct::MatmulProduct(Context& ctx, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                             const dnnl::memory::desc& c, float alpha, const dnnl::memory::desc& bias, bool accumulate) {
  // The scratchpad (where oneDNN packs an operand it cannot read in place: a transposed weight, a whole
  // weight's size) is leased for each product: owned by the primitive, as oneDNN does by default, each of a
  // model's products kept its own for the whole run (vit_b_16 imported: 136 MB).
  const auto user_scratchpad = [](dnnl::primitive_attr a) {
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
  };
  const dnnl::primitive_attr attr = output_scale_attr(alpha);
  // In bf16 an f32 operand is converted, so copied anyway: into a plain bf16 copy. A bf16 operand (an
  // activation between bf16 layers) is taken as it is where a fast kernel accepts it. C keeps its type.
  const dt compute = ctx.compute_type();
  const int converted =
      compute == dt::f32 ? 0 : (data_type_of(a) != compute ? 1 : 0) | (data_type_of(b) != compute ? 2 : 0);
  auto operand = [&](int copies, int bit, const dnnl::memory::desc& md, dt type) {
    return copies & bit ? plain_desc(dims_of(md), type) : md;
  };
  // C += the product: a sum post-op where C is written in place, an adding copy where it goes through a buffer.
  // A fresh attribute each time: a copied primitive_attr shares its post-ops with the original.
  const auto with_sum = [&] {
    dnnl::primitive_attr summing = output_scale_attr(alpha);
    dnnl::post_ops ops = summing.get_post_ops();
    ops.append_sum(1.0f);
    summing.set_post_ops(ops);
    return summing;
  };
  const auto product = [&](const dnnl::memory::desc& ma, const dnnl::memory::desc& mb, const dnnl::memory::desc& mc) {
    return make_matmul_pd(ctx.engine(), ma, mb, bias, mc, user_scratchpad(accumulate && mc == c ? with_sum() : attr));
  };
  const auto keep = [&](const dnnl::matmul::primitive_desc& pd, const dnnl::memory::desc& ma,
                        const dnnl::memory::desc& mb, const dnnl::memory::desc& mc) {
    matmul_ = dnnl::matmul(pd);
    scratchpad_md_ = pd.scratchpad_desc();
    a_ = LeasedCopy(ctx, a, ma);
    b_ = LeasedCopy(ctx, b, mb);
    c_.reset();
    if (mc != c) {
      c_md_ = mc;
      c_ = Copy(ctx, mc, c, accumulate ? Copy::Mode::add : Copy::Mode::replace);
    }
  };
  // Try the operands as given first, then with plain copies of A, B, C, in rising order of copying.
  for (int copies = converted; copies < 8; ++copies) {
    if ((copies & converted) != converted) continue;
    const dnnl::memory::desc ma = operand(copies, 1, a, compute), mb = operand(copies, 2, b, compute);
    const dnnl::memory::desc mc = operand(copies, 4, c, data_type_of(c));
    const auto pd = product(ma, mb, mc);
    if (std::string(pd.impl_info_str()).starts_with("ref")) continue;
    keep(pd, ma, mb, mc);
    return;
  }
  // Only the reference kernel exists for this problem: copying would not help it (but for bf16's).
  const dnnl::memory::desc ma = operand(converted, 1, a, compute), mb = operand(converted, 2, b, compute);
  keep(product(ma, mb, c), ma, mb, c);
}

void MatmulProduct::operator()(Context& ctx, const dnnl::memory& a, const dnnl::memory& b, const dnnl::memory& c,
                               const dnnl::memory& bias) {
  Tensor c_buffer = c_ ? ctx.lease(c_md_) : Tensor();
  Tensor scratchpad = scratchpad_md_.get_size() > 0 ? ctx.lease(scratchpad_md_) : Tensor();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, a_(ctx, a)}, {DNNL_ARG_WEIGHTS, b_(ctx, b)}, {DNNL_ARG_DST, c_ ? c_buffer.memory() : c}};
  if (bias) args.insert({DNNL_ARG_BIAS, bias});
  if (!scratchpad.empty()) args.insert({DNNL_ARG_SCRATCHPAD, scratchpad.memory()});
  matmul_.execute(ctx.stream(), args);
  if (!scratchpad.empty()) ctx.give_back(scratchpad);
  a_.release(ctx);
  b_.release(ctx);
  if (c_) {
    (*c_)(ctx, c_buffer.memory(), c);
    ctx.give_back(c_buffer);
  }
}

}  // namespace ddl
