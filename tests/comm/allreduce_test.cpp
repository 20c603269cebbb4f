// The all-reduce algorithms against MPI_Allreduce, run under mpirun with 1 to 5 ranks (CTest registers
// one run per rank count). Sizes: empty, one element, 7, ranks - 1 (fewer than one per rank) and about a
// million plus 3 (many pipelined chunks, not divisible by the rank count).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "comm/allreduce.hpp"
#include "comm/gradient_reducer.hpp"
#include "comm/mpi_environment.hpp"
#include "core/aligned_buffer.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

std::vector<float> rank_data(std::size_t n, int rank) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * rank) * (1 + rank % 3);
  return v;
}

std::vector<std::size_t> sizes(int ranks) { return {0, 1, 7, static_cast<std::size_t>(ranks - 1), 1000003}; }

struct Case {
  AllreduceAlgorithm algorithm;
  WireType wire;
};

class AllreduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(AllreduceTest, MatchesMpiAllreduce) {
  Communicator comm;
  const Case c = GetParam();
  // A small chunk so that even the mid sizes are cut into several pipelined pieces.
  Allreducer reducer(comm, {c.algorithm, c.wire, 4096});
  for (std::size_t n : sizes(comm.size())) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
      std::vector<float> mine = rank_data(n, comm.rank()), expected = mine, magnitude(n);
      comm.allreduce_sum(expected);
      for (std::size_t i = 0; i < n; ++i) magnitude[i] = std::abs(mine[i]);
      comm.allreduce_sum(magnitude);
      reducer.run(mine, op);
      const double scale = op == ReduceOp::average ? 1.0 / comm.size() : 1.0;
      // f32: only the order of the additions differs. bf16 wire: the documented bound.
      const double rel = c.wire == WireType::bf16 ? bf16_wire_error_bound(comm.size()) : 1e-6 * comm.size();
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (std::abs(mine[i] - expected[i] * scale) > rel * magnitude[i] * scale + 1e-7) ++bad;
      EXPECT_EQ(bad, 0u) << "n=" << n << " ranks=" << comm.size();
      // Every replica must hold the same bits, or data-parallel replicas drift apart.
      std::vector<float> first = mine;
      comm.broadcast(first, 0);
      EXPECT_EQ(first, mine) << "replicas differ, n=" << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllreduceTest,
                         ::testing::Values(Case{AllreduceAlgorithm::ring, WireType::f32},
                                           Case{AllreduceAlgorithm::ring, WireType::bf16},
                                           Case{AllreduceAlgorithm::hierarchical, WireType::f32},
                                           Case{AllreduceAlgorithm::mpi, WireType::f32}),
                         [](const auto& info) {
                           return to_string(info.param.algorithm) +
                                  (info.param.wire == WireType::bf16 ? "_bf16" : "_f32");
                         });

TEST(Allreduce, ReduceScatterThenAllGatherGiveTheRingsBits) {
  // Sharded optimizer state: a rank's shard after reduce_scatter holds exactly what the ring's run() gives
  // there, and all_gather of every rank's shard rebuilds the whole buffer; an f32 gather even with a bf16 wire.
  Communicator comm;
  for (WireType wire : {WireType::f32, WireType::bf16}) {
    Allreducer reducer(comm, {AllreduceAlgorithm::ring, wire, 4096});
    for (std::size_t n : sizes(comm.size())) {
      std::vector<float> whole = rank_data(n, comm.rank()), scattered = whole;
      reducer.run(whole, ReduceOp::average);
      reducer.reduce_scatter(scattered, ReduceOp::average);
      const IndexRange mine = ring_shard(n, comm.size(), comm.rank());
      ASSERT_LE(mine.end, n);
      if (wire == WireType::f32)
        for (std::size_t i = mine.begin; i < mine.end; ++i) ASSERT_EQ(scattered[i], whole[i]) << "n " << n << " i " << i;
      // Each rank's own values in its shard, garbage elsewhere: the gather must bring every other shard.
      std::vector<float> gathered(n, -1.0f);
      for (std::size_t i = mine.begin; i < mine.end; ++i) gathered[i] = 0.5f * static_cast<float>(i) + 1e-3f;
      reducer.all_gather(gathered);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(gathered[i], 0.5f * static_cast<float>(i) + 1e-3f) << "n " << n;
    }
  }
  // The shards tile the buffer.
  for (int ranks = 1; ranks <= 5; ++ranks) {
    std::size_t covered = 0;
    for (int r = 0; r < ranks; ++r) covered += ring_shard(10, ranks, r).end - ring_shard(10, ranks, r).begin;
    EXPECT_EQ(covered, 10u);
  }
}

TEST(Allreduce, ReducingBucketsToTheirOwnersGivesTheReduceScattersBits) {
  // ZeRO's stage 2: buckets in any cut, each reduced to the ranks that own its values, leave in every
  // rank's shard the bits reduce_scatter leaves there; buckets that lie inside one shard, and ones that span
  // several, with pieces of many chunks.
  Communicator comm;
  Allreducer reducer(comm, {AllreduceAlgorithm::ring, WireType::f32, 4096});
  for (std::size_t n : sizes(comm.size())) {
    // About 50 buckets, mostly inside one shard; three, each spanning shards; one.
    for (const std::size_t bucket : {std::max<std::size_t>(3, n / 50), n / 3 + 1, n}) {
      if (bucket == 0) continue;
      std::vector<float> scattered = rank_data(n, comm.rank()), owned = scattered;
      reducer.reduce_scatter(scattered, ReduceOp::average);
      for (std::size_t end = n; end > 0;) {  // last first, as backward reports them
        const std::size_t begin = end > bucket ? end - bucket : 0;
        reducer.reduce_to_owners(owned, begin, end - begin, ReduceOp::average);
        end = begin;
      }
      const IndexRange mine = ring_shard(n, comm.size(), comm.rank());
      for (std::size_t i = mine.begin; i < mine.end; ++i)
        ASSERT_EQ(owned[i], scattered[i]) << "n " << n << ", buckets of " << bucket << ", i " << i;
    }
  }
  std::vector<float> values(10);
  EXPECT_THROW(reducer.reduce_to_owners(values, 8, 3, ReduceOp::sum), Error);
}

TEST(Allreduce, GatheringRangesFromTheirOwnersGivesTheAllGathersValues) {
  // ZeRO's stage 3: each rank holds only its shard (the rest here NaN, as if given back); ranges in any cut,
  // gathered in forward order, leave every rank what all_gather does.
  Communicator comm;
  Allreducer reducer(comm, {AllreduceAlgorithm::ring, WireType::f32, 4096});
  for (std::size_t n : sizes(comm.size())) {
    for (const std::size_t range : {std::max<std::size_t>(3, n / 50), n / 3 + 1, n}) {
      if (range == 0) continue;
      std::vector<float> gathered = rank_data(n, comm.rank());
      const IndexRange mine = ring_shard(n, comm.size(), comm.rank());
      for (std::size_t i = 0; i < n; ++i)
        if (i < mine.begin || i >= mine.end) gathered[i] = std::nanf("");
      std::vector<float> expected = gathered;
      reducer.all_gather(expected);
      for (std::size_t begin = 0; begin < n; begin += range)
        reducer.gather_from_owners(gathered, begin, std::min(range, n - begin));
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(gathered[i], expected[i]) << "n " << n << ", ranges of " << range << ", i " << i;
    }
  }
  std::vector<float> values(10);
  EXPECT_THROW(reducer.gather_from_owners(values, 8, 3), Error);
}

// The planner times pipeline-style messages with it: each rank's bytes reach the next rank, the last's
// the first; sizes that differ are refused before anything is sent.
TEST(Communicator, ShiftPassesEachRanksBytesToTheNext) {
  Communicator comm;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{70000}}) {
    std::vector<char> send(n), receive(n, -1);
    for (std::size_t i = 0; i < n; ++i) send[i] = static_cast<char>(comm.rank() * 31 + i % 97);
    comm.shift(send, receive);
    const int before = (comm.rank() + comm.size() - 1) % comm.size();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += receive[i] != static_cast<char>(before * 31 + i % 97);
    EXPECT_EQ(bad, 0u) << n << " bytes";
  }
  std::vector<char> four(4), three(3);
  EXPECT_THROW(comm.shift(four, three), Error);
}

TEST(Allreduce, Bf16WireActuallyRounds) {
  // A value bf16 cannot hold: the f32 path keeps it, the bf16 path does not (so the test above is real).
  Communicator comm;
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<float> a(8, comm.rank() == 0 ? 1.0f + 1.0f / 1024 : 0.0f), b = a;
  Allreducer(comm, {AllreduceAlgorithm::ring, WireType::f32, 4096}).run(a, ReduceOp::sum);
  Allreducer(comm, {AllreduceAlgorithm::ring, WireType::bf16, 4096}).run(b, ReduceOp::sum);
  EXPECT_EQ(a[0], 1.0f + 1.0f / 1024);
  EXPECT_NE(b[0], a[0]);
  EXPECT_NEAR(b[0], a[0], bf16_wire_error_bound(comm.size()) * a[0]);
}

TEST(GradientReducer, FusesReadyRangesIntoBucketsAndAverages) {
  Communicator comm;
  Allreducer reducer(comm, {AllreduceAlgorithm::ring, WireType::f32, 4096});
  GradientReducer buckets(reducer, 1000 * sizeof(float), GradientReducer::Reduction::all_reduce);
  // Five "layers" of 300, 10, 900, 50 and 2000 values, reported last first as backward would.
  const std::vector<std::size_t> bounds = {0, 300, 310, 1210, 1260, 3260};
  for (int step = 0; step < 2; ++step) {
    std::vector<float> grads = rank_data(3260, comm.rank() + step), expected = grads;
    comm.allreduce_sum(expected);
    for (int layer = 4; layer >= 0; --layer) buckets.ready(grads, bounds[layer], bounds[layer + 1] - bounds[layer]);
    buckets.finish(grads);
    for (std::size_t i = 0; i < grads.size(); ++i)
      ASSERT_NEAR(grads[i], expected[i] / comm.size(), 1e-5) << "element " << i;
    // [1260, 3260) reaches 1000 values alone; the four earlier ranges reach it together only when the
    // first layer's arrives, so they go as one second bucket and finish() has nothing left to send.
    EXPECT_EQ(buckets.buckets_last_step(), 2u);
  }
  std::vector<float> grads(10);
  buckets.ready(grads, 5, 5);
  EXPECT_THROW(buckets.ready(grads, 0, 3), Error);  // does not end where the previous range began
}

TEST(GradientReducer, ShardedGradientsKeepOnlyThisRanksShardResident) {
  // Stage 2's buckets on the bucket thread and on the caller's: this rank's shard holds the mean, and the
  // whole pages of every bucket outside it are given back to the kernel (they read as zero afterwards).
  Communicator comm;
  // Buffers of 64 MB a rank: 2 and 3 ranks say what more would, in a fraction of the time.
  if (comm.size() < 2 || comm.size() > 3) GTEST_SKIP() << "runs on 2 and 3 ranks";
  Allreducer reducer(comm, {AllreduceAlgorithm::ring, WireType::f32, 1 << 20});
  const std::size_t n = 1 << 24;  // 64 MB: a mapped buffer, like the model's, of many 2 MB blocks
  for (const bool threaded : {true, false}) {
    GradientReducer buckets(reducer, 8 << 20, GradientReducer::Reduction::to_owners, threaded);
    AlignedBuffer<float> grads(n);
    const std::vector<float> mine = rank_data(n, comm.rank());
    std::copy(mine.begin(), mine.end(), grads.data());
    std::vector<float> expected = mine;
    reducer.reduce_scatter(expected, ReduceOp::average);
    const std::span<float> all(grads.data(), n);
    for (std::size_t end = n; end > 0;) {  // "layers" of 100,000 values, last first
      const std::size_t begin = end > 100000 ? end - 100000 : 0;
      buckets.ready(all, begin, end - begin);
      end = begin;
    }
    buckets.finish(all);
    const IndexRange shard = ring_shard(n, comm.size(), comm.rank());
    for (std::size_t i = shard.begin; i < shard.end; ++i) ASSERT_EQ(grads.data()[i], expected[i]) << "i " << i;
    // Only the 2 MB blocks that straddle the shard's edges stay: nearly all the rest reads zero, none of it
    // without the release (and half of it if blocks that straddle two buckets stayed).
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < n; ++i)
      zeros += (i < shard.begin || i >= shard.end) && grads.data()[i] == 0.0f && mine[i] != 0.0f;
    EXPECT_GT(zeros, 0.8 * static_cast<double>(n - (shard.end - shard.begin))) << "threaded " << threaded;
  }
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  ddl::MpiEnvironment mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
