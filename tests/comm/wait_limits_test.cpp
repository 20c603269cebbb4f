// The hang detector's time limits: fixed, or learned from the job's own waits and steps.
#include "comm/wait_limits.hpp"

#include <gtest/gtest.h>

namespace ddl {
namespace {

constexpr const char* kRing = "training: receiving a ring all-reduce step from rank 1";

// `waits` completions of kRing of `wait_s` each, and as many steps of `step_s`.
WaitLimits learned(double wait_s, double step_s, int waits = 10) {
  WaitLimits limits(std::nullopt);
  for (int i = 0; i < waits; ++i) {
    limits.waited(kRing, wait_s);
    limits.step_took(step_s);
  }
  return limits;
}

TEST(WaitLimits, AFixedTimeoutIsTheLimitOfEveryWaitOnceTheJobHasStarted) {
  WaitLimits limits(5.0);
  // Set-up and the first step (measuring stages, building primitives) may keep a peer waiting far longer.
  EXPECT_EQ(limits.limit(kRing), WaitLimits::kStartupSeconds);
  EXPECT_EQ(limits.explain(kRing), "--timeout 5, but 600 s while the job starts or writes a checkpoint");
  limits.step_took(100.0);
  limits.waited(kRing, 100.0);
  EXPECT_EQ(limits.limit(kRing), 5.0);
  EXPECT_EQ(limits.limit("anything"), 5.0);
  EXPECT_EQ(limits.explain(kRing), "--timeout 5");
  // The other ranks wait for a checkpoint's writers for as long as the write takes.
  EXPECT_EQ(limits.limit("checkpoint: in a barrier with all ranks (ranks 0, 1)"), WaitLimits::kStartupSeconds);
  // A move to another layout starts again, until its first step.
  limits.starting();
  EXPECT_EQ(limits.limit(kRing), WaitLimits::kStartupSeconds);
  limits.step_took(1.0);
  EXPECT_EQ(limits.limit(kRing), 5.0);
  EXPECT_EQ(WaitLimits(0.0).limit(kRing), 0.0);  // no limit, ever
  EXPECT_EQ(WaitLimits(900.0).limit(kRing), 900.0);  // a fixed limit above the start-up one
}

TEST(WaitLimits, GenerousUntilAKindAndTheStepsHaveBeenSeenAFewTimes) {
  WaitLimits limits(std::nullopt);
  EXPECT_EQ(limits.limit(kRing), WaitLimits::kStartupSeconds);
  // The first completions are start-up (building primitives): slow, and not taken as typical.
  limits.waited(kRing, 200.0);
  limits.step_took(250.0);
  limits.waited(kRing, 150.0);
  limits.step_took(160.0);
  EXPECT_EQ(limits.limit(kRing), WaitLimits::kStartupSeconds);
  limits.waited(kRing, 0.01);
  limits.step_took(0.2);
  EXPECT_EQ(limits.limit(kRing), WaitLimits::kFloorSeconds);
  EXPECT_NE(limits.explain(kRing).find("--timeout auto: 30 s"), std::string::npos) << limits.explain(kRing);
  // A kind never completed (the first evaluation, the first checkpoint) keeps the start-up limit.
  EXPECT_EQ(limits.limit("evaluation: in a sum (MPI_Allreduce) with all ranks (ranks 0, 1)"),
            WaitLimits::kStartupSeconds);
}

TEST(WaitLimits, FastStepsStopAStoppedPeerWithinTheFloor) {
  const WaitLimits limits = learned(0.02, 0.3);
  EXPECT_EQ(limits.limit(kRing), 30.0);
}

TEST(WaitLimits, SlowStepsAreNeverStoppedByTheirOwnWaits) {
  // Steps of 20 s: a peer may legitimately keep this rank waiting for most of a step (a slower node, a
  // pipeline stage waiting for its neighbour's forward).
  const WaitLimits limits = learned(18.0, 20.0);
  EXPECT_GE(limits.limit(kRing), 200.0);
  // The waits of a kind stay far from its limit even when one step is three times as slow as usual.
  EXPECT_GT(limits.limit(kRing), 3 * 20.0);
}

TEST(WaitLimits, ALongWaitOfOneKindRaisesItsLimitOnly) {
  WaitLimits limits = learned(0.01, 0.1);
  const std::string other = "training: in the step vote (stop, checkpoint) with all ranks (step vote) (ranks 0, 1)";
  for (int i = 0; i < 3; ++i) limits.waited(other, 0.01);
  limits.waited(kRing, 8.0);
  EXPECT_EQ(limits.limit(kRing), 80.0);
  EXPECT_EQ(limits.limit(other), 30.0);
}

}  // namespace
}  // namespace ddl
