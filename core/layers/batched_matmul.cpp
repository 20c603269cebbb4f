#include "core/layers/batched_matmul.hpp"

#include <numeric>
#include <string>

#include "core/error.hpp"
#include "core/onednn_api.hpp"

namespace ddl {

dnnl::memory::desc BatchedMatmul::transposed(const dnnl::memory::desc& md) {
  std::vector<int> perm(dims_of(md).size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return md.permute_axes(perm);
}

BatchedMatmul::BatchedMatmul(Context& ctx, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                             const dnnl::memory::desc& c, float alpha, bool with_backward,
                             const dnnl::memory::desc& bias) {
  const dims_t da = dims_of(a), db = dims_of(b), dc = dims_of(c);
  const std::size_t n = da.size();
  if (n < 2 || db.size() != n || dc.size() != n || da[n - 1] != db[n - 2] || dc[n - 2] != da[n - 2] ||
      dc[n - 1] != db[n - 1] || !std::equal(da.begin(), da.end() - 2, db.begin()) ||
      !std::equal(da.begin(), da.end() - 2, dc.begin()))
    throw Error("batched matmul: shapes " + to_string(da) + " @ " + to_string(db) + " -> " + to_string(dc) +
                " do not agree");
  fwd_ = MatmulProduct(ctx, a, b, c, alpha, bias);
  if (!with_backward) return;
  bwd_a_ = MatmulProduct(ctx, c, transposed(b), a, alpha);
  bwd_b_ = MatmulProduct(ctx, transposed(a), c, b, alpha);
}

void BatchedMatmul::forward(Context& ctx, const dnnl::memory& a, const dnnl::memory& b, const dnnl::memory& c,
                            const dnnl::memory& bias) {
  fwd_(ctx, a, b, c, bias);
}

void BatchedMatmul::backward(Context& ctx, const dnnl::memory& a, const dnnl::memory& b, const dnnl::memory& dc,
                             const dnnl::memory& da, const dnnl::memory& db) {
  if (!bwd_a_) throw Error("batched matmul: backward on an operation built for inference");
  // The transposed views share the operands' storage, so the handles are rewrapped, not copied.
  auto view = [&](const dnnl::memory& m) {
    return dnnl::memory(transposed(m.get_desc()), m.get_engine(), m.get_data_handle());
  };
  if (da) (*bwd_a_)(ctx, dc, view(b), da);
  if (db) (*bwd_b_)(ctx, view(a), dc, db);
}

}  // namespace ddl
