#include "core/buffer_pool.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ddl
