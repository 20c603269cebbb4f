#include "core/buffer_pool.hpp"

#include <gtest/gtest.h>
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

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

// One step's requests as a training step makes them: an output leased in forward and held into the next
// step's forward, weight copies and gradients that live for one call, and a gradient that outlives the
// layer before it. `held` carries the outputs from one step to the next.
void run_training_like_step(BufferPool& pool, std::vector<AlignedBuffer<std::byte>>& held, int kind = 0) {
  pool.begin_step(kind);
  std::vector<AlignedBuffer<std::byte>> outputs;
  for (std::size_t layer = 0; layer < 4; ++layer) {
    if (!held.empty()) {
      pool.give(std::move(held.front()));  // last step's output of this layer
      held.erase(held.begin());
    }
    AlignedBuffer<std::byte> weights = pool.take(64 + layer);
    outputs.push_back(pool.take(4096 >> layer));
    pool.give(std::move(weights));
  }
  AlignedBuffer<std::byte> gradient = pool.take(512);
  for (std::size_t layer = 0; layer < 4; ++layer) {
    AlignedBuffer<std::byte> input_gradient = pool.take(1024 << layer);
    pool.give(std::move(gradient));
    gradient = std::move(input_gradient);
  }
  pool.give(std::move(gradient));
  held = std::move(outputs);
}

// Once two steps have asked alike, later steps are served from the learned arena: nothing is allocated.
TEST(BufferPool, LearnedStepsAllocateNothing) {
  BufferPool pool;
  std::vector<AlignedBuffer<std::byte>> held;
  for (int step = 0; step < 3; ++step) run_training_like_step(pool, held);
  const std::size_t learned = pool.allocations();
  for (int step = 0; step < 5; ++step) run_training_like_step(pool, held);
  EXPECT_EQ(pool.allocations(), learned);
}

// The arena is as large as the most bytes alive at once: a large request given back before a small one
// and a second large one are taken shares its place with the second, and the small one lies right after
// them (best fit held two large buffers: the first served the small request).
TEST(BufferPool, LearnedPlacesHoldTheMostBytesAliveAtOnce) {
  BufferPool pool;
  const std::byte *first_large = nullptr, *second_large = nullptr, *small_one = nullptr;
  for (int step = 0; step < 4; ++step) {
    pool.begin_step(0);
    AlignedBuffer<std::byte> a = pool.take(1 << 20);
    first_large = a.data();
    pool.give(std::move(a));
    AlignedBuffer<std::byte> b = pool.take(100);
    AlignedBuffer<std::byte> c = pool.take(1 << 20);
    small_one = b.data();
    second_large = c.data();
    ASSERT_GE(b.size(), 100u);
    ASSERT_GE(c.size(), 1u << 20);
    pool.give(std::move(b));
    pool.give(std::move(c));
  }
  EXPECT_EQ(first_large, second_large) << "never alive together: one place";
  EXPECT_EQ(small_one, second_large + (1 << 20)) << "alive with the second: right after it";
}

// A request goes into a gap that the requests alive with it leave: of two requests never alive together
// but each alive with a larger one, the second takes the first's place, right after the larger one.
TEST(BufferPool, LearnedPlacesFillTheGapsOfLargerRequests) {
  BufferPool pool;
  const std::byte *large = nullptr, *early = nullptr, *late = nullptr;
  for (int step = 0; step < 4; ++step) {
    pool.begin_step(0);
    AlignedBuffer<std::byte> x = pool.take(1000);
    AlignedBuffer<std::byte> y = pool.take(600);
    large = x.data();
    early = y.data();
    pool.give(std::move(y));
    AlignedBuffer<std::byte> z = pool.take(400);
    late = z.data();
    pool.give(std::move(z));
    pool.give(std::move(x));
  }
  EXPECT_EQ(early, large + 1024) << "after the larger request, its size rounded to 64 bytes";
  EXPECT_EQ(late, early);
}

// A step of another kind releases the last kind's arena: coming back, that kind allocates it again (once).
TEST(BufferPool, AnotherKindOfStepReleasesTheLastKindsArena) {
  BufferPool pool;
  std::vector<AlignedBuffer<std::byte>> held;
  for (int step = 0; step < 4; ++step) run_training_like_step(pool, held);
  const std::size_t learned = pool.allocations();
  run_training_like_step(pool, held);
  EXPECT_EQ(pool.allocations(), learned);
  pool.begin_step(1);
  AlignedBuffer<std::byte> evaluation = pool.take(256);
  pool.give(std::move(evaluation));
  run_training_like_step(pool, held);
  EXPECT_EQ(pool.allocations(), learned + 2) << "the evaluation's buffer, and the training arena again";
}

// Whatever the steps ask, two buffers out at once never overlap and each holds what was asked: steps of
// two kinds interleaved, some that ask differently (a last, smaller batch), and buffers held across steps.
TEST(BufferPool, BuffersOutAtOnceNeverOverlap) {
  BufferPool pool;
  std::vector<AlignedBuffer<std::byte>> out;
  std::vector<std::uint8_t> marks;
  std::vector<std::size_t> asked;
  std::size_t takes = 0;
  const auto take = [&](std::size_t bytes) {
    ++takes;
    AlignedBuffer<std::byte> b = pool.take(bytes);
    ASSERT_GE(b.size(), bytes);
    const auto mark = static_cast<std::uint8_t>(takes % 255 + 1);
    std::memset(b.data(), mark, bytes);
    out.push_back(std::move(b));
    marks.push_back(mark);
    asked.push_back(bytes);
  };
  const auto give = [&](std::size_t i) {  // the i-th buffer still out, after checking nobody wrote over it
    const auto* p = reinterpret_cast<const std::uint8_t*>(out[i].data());
    EXPECT_TRUE(std::all_of(p, p + asked[i], [&](std::uint8_t v) { return v == marks[i]; })) << "overwritten";
    pool.give(std::move(out[i]));
    out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
    marks.erase(marks.begin() + static_cast<std::ptrdiff_t>(i));
    asked.erase(asked.begin() + static_cast<std::ptrdiff_t>(i));
  };
  std::uint64_t state = 7;
  const auto next = [&] { return (state = state * 6364136223846793005u + 1442695040888963407u) >> 33; };
  for (int step = 0; step < 40; ++step) {
    pool.begin_step(step % 5 == 4 ? 1 : 0);
    // The same program every step of a kind, but every seventh step asks for other sizes.
    state = (step % 5 == 4 ? 11 : 3) + (step % 7 == 6 ? 100 : 0);
    for (int op = 0; op < 30; ++op) {
      if (out.empty() || next() % 3 != 0)
        take(16 + next() % 4096);
      else
        give(next() % out.size());
    }
    while (out.size() > 3) give(0);  // a few stay out into the next step
  }
  while (!out.empty()) give(0);
  EXPECT_LT(pool.allocations(), takes / 2) << "the steps that repeat should be served from learned slots";
}

// Under AddressSanitizer a place given back to the arena is poisoned until it is taken again, so that a use
// after give is reported. Only the sanitizer build has poison to look at.
#if defined(DDL_ADDRESS_SANITIZER)
TEST(BufferPool, APlaceGivenBackIsPoisonedUnderAddressSanitizer) {
  BufferPool pool;
  std::vector<AlignedBuffer<std::byte>> held;
  for (int step = 0; step < 3; ++step) run_training_like_step(pool, held);
  const std::size_t learned = pool.allocations();
  pool.begin_step(0);
  AlignedBuffer<std::byte> weights = pool.take(64);
  std::byte* const place = weights.data();
  EXPECT_EQ(pool.allocations(), learned) << "served from the arena";
  EXPECT_FALSE(__asan_region_is_poisoned(place, 64));
  pool.give(std::move(weights));
  EXPECT_TRUE(__asan_address_is_poisoned(place));
  EXPECT_TRUE(__asan_address_is_poisoned(place + 63));
}
#endif

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
  const float* held = output.get(ctx).data();
  ASSERT_NE(held, nullptr);

  // Compared with what the output holds now: the first storage may have been freed, and the allocator
  // may hand its address to the larger lease.
  LeasedTensor larger;
  larger.reset(plain_desc({2, 16}));
  EXPECT_NE(larger.get(ctx, output).data(), held) << "does not fit: leased from the pool";
  EXPECT_EQ(output.current().data(), held) << "the output keeps its storage";
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
