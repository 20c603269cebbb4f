#include "core/buffer_pool.hpp"

#include <gtest/gtest.h>

#include "core/layers/layer.hpp"

namespace ddl {
namespace {

TEST(BufferPool, TakesTheSmallestFreeBufferThatFits) {
  BufferPool pool;
  AlignedBuffer<std::byte> a = pool.take(300), b = pool.take(100), c = pool.take(200);
  const std::byte* middle = c.data();
  pool.give(std::move(a));
  pool.give(std::move(b));
  pool.give(std::move(c));
  EXPECT_EQ(pool.take(150).data(), middle);
}

TEST(AlignedBuffer, AMovedFromBufferIsEmpty) {
  AlignedBuffer<float> a(16);
  AlignedBuffer<float> b = std::move(a);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.size(), 16u);
  a = std::move(b);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(a.size(), 16u);
}

// A layer's input gradient may take its output's storage (dead from its backward to its next forward),
// and gives it back there, not to the pool.
TEST(LeasedTensor, TakesASparesStorageWhereItFitsAndGivesItBack) {
  Context ctx;
  Tensor output(plain_desc({2, 8}), ctx.engine());
  const float* storage = output.data();
  LeasedTensor gradient;
  gradient.reset(plain_desc({2, 4}));
  EXPECT_EQ(gradient.get(ctx, output).data(), storage);
  EXPECT_TRUE(output.empty()) << "the output must not be used while the gradient holds its storage";
  gradient.give_back(ctx);
  EXPECT_TRUE(gradient.current().empty());
  ASSERT_FALSE(output.empty());
  EXPECT_EQ(output.data(), storage);
  EXPECT_EQ(output.dims(), (dims_t{2, 8}));

  LeasedTensor larger;
  larger.reset(plain_desc({2, 16}));
  EXPECT_NE(larger.get(ctx, output).data(), storage) << "does not fit: leased from the pool";
  EXPECT_FALSE(output.empty());
  larger.give_back(ctx);
}

}  // namespace
}  // namespace ddl
