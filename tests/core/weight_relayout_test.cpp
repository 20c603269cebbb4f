// WeightRelayout: the same bytes as oneDNN's direct reorder, for the layouts it transposes as 32-bit units
// and for those it leaves to the reorder, each time it is made.
#include <gtest/gtest.h>

#include <cstring>

#include "core/layers/weight_relayout.hpp"
#include "core/onednn_api.hpp"

namespace ddl {
namespace {

std::vector<std::uint8_t> bytes_of(const dnnl::memory& m) {
  const auto* p = static_cast<const std::uint8_t*>(m.get_data_handle());
  return {p, p + m.get_desc().get_size()};
}

void reorder_into(Context& ctx, const Tensor& from, const Tensor& to) {
  dnnl::reorder(from.memory(), to.memory()).execute(ctx.stream(), {{DNNL_ARG_FROM, from.memory()}, {DNNL_ARG_TO, to.memory()}});
}

TEST(WeightRelayout, GivesTheBytesOfOneDnnsReorder) {
  Context ctx;
  struct Case {
    dnnl::memory::dim o, i;
    dt type;
    tag layout;
  };
  const Case cases[] = {{64, 4096, dt::f32, tag::AB16b64a},  {32, 48, dt::f32, tag::AB16b32a},
                        {48, 32, dt::f32, tag::AB16b16a},    {64, 4096, dt::bf16, tag::AB8b64a2b},
                        {96, 64, dt::bf16, tag::AB8b32a2b},  {16, 16, dt::bf16, tag::AB8b16a2b},
                        {10, 64, dt::bf16, tag::AB8b16a2b},  // padded: left to the reorder
                        {64, 40, dt::f32, tag::AB16b64a},    // likewise
                        {64, 64, dt::f32, tag::BA16a64b},    // another layout
                        {64, 64, dt::bf16, tag::ab}};
  for (const Case& c : cases) {
    Tensor weights(plain_desc({c.o, c.i}), ctx.engine());
    for (std::size_t k = 0; k < weights.elements(); ++k) weights.data()[k] = 0.001f * static_cast<float>(k % 1013) - 0.3f;
    const dnnl::memory::desc to({c.o, c.i}, c.type, c.layout);
    Tensor expected(to, ctx.engine());
    std::memset(expected.memory().get_data_handle(), 0x55, to.get_size());
    reorder_into(ctx, weights, expected);
    WeightRelayout copy(ctx, weights.desc(), to);
    const dnnl::memory& got = copy(ctx, weights.memory());
    EXPECT_EQ(bytes_of(got), bytes_of(expected.memory())) << c.o << "x" << c.i;
    EXPECT_EQ(copy.last(weights.memory()).get_data_handle(), got.get_data_handle());
    // Again after a change, the copy given back to the pool in between: it follows the weights.
    copy.release(ctx);
    weights.data()[1] = 7.0f;
    reorder_into(ctx, weights, expected);
    EXPECT_EQ(bytes_of(copy(ctx, weights.memory())), bytes_of(expected.memory())) << c.o << "x" << c.i;
    copy.release(ctx);
  }
}

}  // namespace
}  // namespace ddl
