#include "core/layers/batched_matmul.hpp"

#include <numeric>

#include "core/error.hpp"

namespace ddl {
namespace {

dnnl::matmul make_matmul(Context& ctx, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                         const dnnl::memory::desc& c, float alpha, const dnnl::memory::desc& bias = {}) {
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, bias, c), attr, ctx.engine()));
}

}  // namespace

dnnl::memory::desc BatchedMatmul::transposed(const dnnl::memory::desc& md) {
  std::vector<int> perm(md.dims().size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return md.permute_axes(perm);
}

BatchedMatmul::BatchedMatmul(Context& ctx, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                             const dnnl::memory::desc& c, float alpha, bool with_backward,
                             const dnnl::memory::desc& bias) {
  const dims_t da = a.dims(), db = b.dims(), dc = c.dims();
  const std::size_t n = da.size();
  if (n < 2 || db.size() != n || dc.size() != n || da[n - 1] != db[n - 2] || dc[n - 2] != da[n - 2] ||
      dc[n - 1] != db[n - 1] || !std::equal(da.begin(), da.end() - 2, db.begin()) ||
      !std::equal(da.begin(), da.end() - 2, dc.begin()))
    throw Error("batched matmul: shapes " + to_string(da) + " @ " + to_string(db) + " -> " + to_string(dc) +
                " do not agree");
  fwd_ = make_matmul(ctx, a, b, c, alpha, bias);
  if (!with_backward) return;
  bwd_a_ = make_matmul(ctx, c, transposed(b), a, alpha);
  bwd_b_ = make_matmul(ctx, transposed(a), c, b, alpha);
}

void BatchedMatmul::forward(Context& ctx, const dnnl::memory& a, const dnnl::memory& b, const dnnl::memory& c,
                            const dnnl::memory& bias) {
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
  if (bias) args.insert({DNNL_ARG_BIAS, bias});
  fwd_.execute(ctx.stream(), args);
}

void BatchedMatmul::backward(Context& ctx, const dnnl::memory& a, const dnnl::memory& b, const dnnl::memory& dc,
                             const dnnl::memory& da, const dnnl::memory& db) {
  if (!bwd_a_) throw Error("batched matmul: backward on an operation built for inference");
  // The transposed views share the operands' storage, so the handles are rewrapped, not copied.
  auto view = [&](const dnnl::memory& m) {
    return dnnl::memory(transposed(m.get_desc()), m.get_engine(), m.get_data_handle());
  };
  if (da) bwd_a_->execute(ctx.stream(), {{DNNL_ARG_SRC, dc}, {DNNL_ARG_WEIGHTS, view(b)}, {DNNL_ARG_DST, da}});
  if (db) bwd_b_->execute(ctx.stream(), {{DNNL_ARG_SRC, view(a)}, {DNNL_ARG_WEIGHTS, dc}, {DNNL_ARG_DST, db}});
}

}  // namespace ddl
