// The mark of how far a run got, from which a resumed run says how many steps it trains again.
#include "launch/train/progress_mark.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

namespace ddl {
namespace {

TEST(ProgressMark, SaysHowManyStepsAResumedRunTrainsAgain) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ddl_progress_mark_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_EQ(ProgressMark::trained_again(dir.string(), 0, 0), "");  // no mark yet
  ProgressMark mark(dir.string());
  mark.step_done(2, 55, 100);  // the first step's mark is written at once
  mark.step_done(2, 60, 100);  // within ProgressMark::kEvery of it: not written
  EXPECT_EQ(ProgressMark::trained_again(dir.string(), 2, 40),
            "; the run before it reached epoch 3, step 55 of 100 at least: 15 steps or more trained again");
  EXPECT_EQ(ProgressMark::trained_again(dir.string(), 1, 90),
            "; the run before it reached epoch 3, step 55 of 100 at least: 65 steps or more trained again");
  // A checkpoint at or past the mark (written after it) trains nothing again.
  EXPECT_EQ(ProgressMark::trained_again(dir.string(), 2, 55), "");
  EXPECT_EQ(ProgressMark::trained_again(dir.string(), 3, 0), "");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddl
