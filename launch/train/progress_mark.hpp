// How far a run got, kept beside its checkpoints (<checkpoint-dir>/progress.txt, by world rank 0 every few
// seconds): a run that resumes after a crash or a lost node says how many steps it trains again, which the
// checkpoint alone cannot tell.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ddl {

class ProgressMark {
 public:
  static constexpr std::chrono::seconds kEvery{10};

  explicit ProgressMark(std::string checkpoint_dir);
  // After a step: `step` steps of epoch `epoch` (0-based) done, of `steps`. Writes at most every kEvery; a
  // mark that cannot be written is left out (the checkpoint beside it reports a folder it cannot write).
  void step_done(std::uint64_t epoch, std::size_t step, std::size_t steps);
  // For a run resumed at epochs_done + steps_done: "; the run before it reached epoch 3, step 55 of 100 at
  // least: 15 steps or more trained again" (the mark lags the run by up to kEvery), or "" where the mark is
  // missing, unreadable or not past the checkpoint.
  static std::string trained_again(const std::string& checkpoint_dir, std::uint64_t epochs_done,
                                   std::uint64_t steps_done);

 private:
  std::string path_;
  std::chrono::steady_clock::time_point written_{};
};

}  // namespace ddl
