#include "core/layers/weight_relayout.hpp"

#include "core/onednn_api.hpp"

namespace ddl {

using memory = dnnl::memory;

namespace {

// The target's block of output features when it is one of the transposable layouts, else 0.
memory::dim output_block(const memory::desc& to) {
  const dims_t d = dims_of(to);
  const dt type = data_type_of(to);
  if (d.size() != 2 || d[1] % 16 != 0 || (type != dt::f32 && type != dt::bf16)) return 0;
  const std::pair<memory::dim, tag> f32_tags[] = {{64, tag::AB16b64a}, {32, tag::AB16b32a}, {16, tag::AB16b16a}};
  const std::pair<memory::dim, tag> bf16_tags[] = {{64, tag::AB8b64a2b}, {32, tag::AB8b32a2b}, {16, tag::AB8b16a2b}};
  for (const auto& [block, t] : type == dt::f32 ? f32_tags : bf16_tags)
    if (d[0] % block == 0 && to == memory::desc(d, type, t)) return block;
  return 0;
}

}  // namespace

WeightRelayout::WeightRelayout(Context& ctx, const memory::desc& from, const memory::desc& to) {
  const memory::dim a = output_block(to);
  if (a == 0 || from != plain_desc(dims_of(to))) {
    other_ = LeasedCopy(ctx, from, to);
    return;
  }
  const dims_t d = dims_of(to);
  const bool bf16 = data_type_of(to) == dt::bf16;
  const memory::dim units = bf16 ? 8 : 16, row = bf16 ? d[1] / 2 : d[1];  // 4-byte units: a block's, a row's
  const dims_t view{d[0] / a, d[1] / 16, units, a};
  Units u{to, memory::desc(view, dt::s32, dims_t{a * row, units, 1, row}), memory::desc(view, dt::s32, tag::abcd),
          {}, {}};
  u.transpose = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine(), u.plain, ctx.engine(), u.transposed));
  if (bf16)
    u.to_bf16 = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine(), from, ctx.engine(), plain_desc(d, dt::bf16)));
  units_ = std::move(u);
}

const memory& WeightRelayout::operator()(Context& ctx, const memory& from) {
  if (!units_) return other_(ctx, from);
  if (copy_.empty()) copy_ = ctx.lease(units_->to);
  Tensor plain_bf16;
  void* plain = from.get_data_handle();
  if (units_->to_bf16) {
    plain_bf16 = ctx.lease(plain_desc(dims_of(units_->to), dt::bf16));
    units_->to_bf16->execute(ctx.stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, plain_bf16.memory()}});
    plain = plain_bf16.memory().get_data_handle();
  }
  const memory source(units_->plain, ctx.engine(), plain);
  const memory target(units_->transposed, ctx.engine(), copy_.memory().get_data_handle());
  units_->transpose.execute(ctx.stream(), {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, target}});
  if (!plain_bf16.empty()) ctx.give_back(plain_bf16);
  return copy_.memory();
}

void WeightRelayout::release(Context& ctx) {
  other_.release(ctx);
  if (!copy_.empty()) ctx.give_back(copy_);
}

}  // namespace ddl
