#include "core/buffer_pool.hpp"

#include <gtest/gtest.h>

#include "core/layers/layer.hpp"

namespace ddl {
namespace {

TEST(BufferPool, ALargerFreeBufferServesASmallerRequest) {
  BufferPool pool;
  AlignedBuffer<std::byte> large = pool.take(1000);
  const std::byte* where = large.data();
  pool.give(std::move(large));
  AlignedBuffer<std::byte> small = pool.take(10);
  EXPECT_EQ(small.data(), where);
  EXPECT_EQ(small.size(), 1000u);
}

TEST(BufferPool, TakesTheSmallestFreeBufferThatFits) {
  BufferPool pool;
  AlignedBuffer<std::byte> a = pool.take(300), b = pool.take(100), c = pool.take(200);
  const std::byte* middle = c.data();
  pool.give(std::move(a));
  pool.give(std::move(b));
  pool.give(std::move(c));
  EXPECT_EQ(pool.take(150).data(), middle);
}

// Gradients grow layer by layer during backward: the pool holds the largest ones, not one of every size.
TEST(BufferPool, ReleasesSmallerFreeBuffersWhenNoneFits) {
  BufferPool pool;
  AlignedBuffer<std::byte> small = pool.take(10);
  pool.give(std::move(small));
  AlignedBuffer<std::byte> large = pool.take(1000);
  EXPECT_EQ(large.size(), 1000u);
  const std::byte* where = large.data();
  pool.give(std::move(large));
  AlignedBuffer<std::byte> again = pool.take(10);
  EXPECT_EQ(again.data(), where) << "the 10-byte buffer should have been released, leaving only the large one";
  EXPECT_EQ(pool.take(10).size(), 10u) << "a fresh buffer: the pool holds nothing else";
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
  LeasedTensor output;
  output.reset(plain_desc({2, 8}));
  const float* storage = output.get(ctx).data();
  LeasedTensor gradient;
  gradient.reset(plain_desc({2, 4}));
  EXPECT_EQ(gradient.get(ctx, output).data(), storage);
  EXPECT_TRUE(output.current().empty()) << "the output must not be used while the gradient holds its storage";
  EXPECT_THROW(output.get(ctx), Error) << "a forward while the storage is lent must fail, not lease anew";
  gradient.give_back(ctx);
  EXPECT_TRUE(gradient.current().empty());
  ASSERT_FALSE(output.current().empty());
  EXPECT_EQ(output.current().data(), storage);
  EXPECT_EQ(output.current().dims(), (dims_t{2, 8}));
  EXPECT_EQ(output.get(ctx).data(), storage) << "the output is held again, not leased anew";

  // A borrower set up again drops the storage and frees its home to lease anew.
  gradient.get(ctx, output);
  gradient.reset(plain_desc({2, 4}));
  EXPECT_FALSE(output.get(ctx).empty());

  LeasedTensor larger;
  larger.reset(plain_desc({2, 16}));
  EXPECT_NE(larger.get(ctx, output).data(), storage) << "does not fit: leased from the pool";
  EXPECT_FALSE(output.current().empty());
  larger.give_back(ctx);
}

// An output given back goes to the pool, where the next lease of its size finds it: a layer's output
// serves the gradients of the layers backward reaches later, and the next forward leases it again.
TEST(LeasedTensor, AnOutputGivenBackServesTheNextLease) {
  Context ctx;
  LeasedTensor output;
  output.reset(plain_desc({4, 8}));
  const float* storage = output.get(ctx).data();
  output.give_back(ctx);
  EXPECT_TRUE(output.current().empty());
  LeasedTensor gradient;
  gradient.reset(plain_desc({4, 8}));
  EXPECT_EQ(gradient.get(ctx).data(), storage);
  gradient.give_back(ctx);
  EXPECT_EQ(output.get(ctx).data(), storage);
}

}  // namespace
}  // namespace ddl
