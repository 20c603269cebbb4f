// Where a rank's compute and loader threads run (thread_placement.hpp), on this machine's CPUs.
#include "launch/thread_placement.hpp"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <thread>

#include "core/thread_affinity.hpp"

namespace ddl {
namespace {

std::vector<int> cpus_of_this_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

TEST(ThreadPlacement, ComputeAndLoaderGetCPUsOfTheirOwnWhereThereAreEnough) {
  const std::vector<int> allowed = cpus_of_this_thread();
  if (allowed.size() < 2) GTEST_SKIP() << "one CPU: nothing to place apart";
  const ThreadPlacement p = place_threads(0, 1, 1, 1);
  ASSERT_EQ(p.compute.size(), 1u);
  ASSERT_EQ(p.loader.size(), 1u);
  EXPECT_NE(p.compute[0], p.loader[0]);
  EXPECT_NE(std::find(allowed.begin(), allowed.end(), p.loader[0]), allowed.end());
  EXPECT_NE(p.note.find("compute threads on CPUs "), std::string::npos) << p.note;
  // Too few CPUs for both: nothing pinned, and the note says why.
  const ThreadPlacement crowded = place_threads(0, 1, static_cast<int>(allowed.size()), 1);
  EXPECT_TRUE(crowded.compute.empty());
  EXPECT_TRUE(crowded.loader.empty());
  EXPECT_NE(crowded.note.find("threads not pinned"), std::string::npos) << crowded.note;
  // A thread pinned runs where it was put.
  std::thread([&] {
    pin_this_thread(p.loader);
    EXPECT_EQ(cpus_of_this_thread(), p.loader);
  }).join();
}

// Ranks that all see the whole machine split it by their index on the node.
TEST(ThreadPlacement, RanksSharingTheMachineSplitItByTheirIndex) {
  const std::vector<int> allowed = cpus_of_this_thread();
  if (allowed.size() < 2 || allowed.size() < std::thread::hardware_concurrency()) GTEST_SKIP() << "needs 2 CPUs, unbound";
  const int half = static_cast<int>(allowed.size() / 2);
  const ThreadPlacement first = place_threads(0, 2, half, 0), second = place_threads(1, 2, half, 0);
  ASSERT_EQ(first.compute.size(), static_cast<std::size_t>(half));
  ASSERT_EQ(second.compute.size(), static_cast<std::size_t>(half));
  std::vector<int> all = first.compute;
  all.insert(all.end(), second.compute.begin(), second.compute.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  // Their shares are taken whole: a third thread for either does not fit.
  EXPECT_TRUE(place_threads(1, 2, half + 1, 0).compute.empty());
}

}  // namespace
}  // namespace ddl
