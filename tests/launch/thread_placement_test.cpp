// Where a rank's compute and loader threads run (thread_placement.hpp): from the CPUs given, and pinned on
// this machine.
#include "launch/thread_placement.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "core/thread_affinity.hpp"

namespace ddl {
namespace {

TEST(ThreadPlacement, ARankWithCPUsOfItsOwnTakesTheFirstForComputeAndTheNextForTheLoader) {
  const ThreadPlacement p = place_threads({4, 5, 6, 7}, 0, 1, 2, 1);
  EXPECT_EQ(p.compute, (std::vector<int>{4, 5}));
  EXPECT_EQ(p.loader, (std::vector<int>{6}));
  EXPECT_EQ(p.note, "compute threads on CPUs 4-5, loader threads on 6");
}

// Ranks that see the same CPUs (no binding, one cgroup for all) split them by their index.
TEST(ThreadPlacement, RanksSharingTheirCPUsSplitThemByTheirIndex) {
  const std::vector<int> node = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(place_threads(node, 0, 2, 3, 1).compute, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(place_threads(node, 1, 2, 3, 1).compute, (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(place_threads(node, 1, 2, 3, 1).loader, (std::vector<int>{7}));
  EXPECT_EQ(place_threads(node, 3, 4, 2, 0).compute, (std::vector<int>{6, 7}));
}

TEST(ThreadPlacement, TooFewCPUsPinNothingAndSaySo) {
  const ThreadPlacement p = place_threads({0, 1}, 1, 2, 1, 1);
  EXPECT_TRUE(p.compute.empty());
  EXPECT_TRUE(p.loader.empty());
  EXPECT_EQ(p.note, "threads not pinned: 1 CPUs a rank for 1 compute and 1 loader threads");
}

// A thread pinned runs where it was put (on this machine's first CPU).
TEST(ThreadPlacement, APinnedThreadRunsOnItsCPUs) {
  const std::vector<int> mine = allowed_cpus();
  ASSERT_FALSE(mine.empty());
  std::thread([&] {
    pin_this_thread({mine.front()});
    EXPECT_EQ(allowed_cpus(), std::vector<int>{mine.front()});
  }).join();
  EXPECT_EQ(allowed_cpus(), mine);
}

}  // namespace
}  // namespace ddl
