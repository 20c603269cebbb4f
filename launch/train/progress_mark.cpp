#include "launch/train/progress_mark.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace ddl {
namespace {

std::string mark_path(const std::string& dir) { return (std::filesystem::path(dir) / "progress.txt").string(); }

}  // namespace

ProgressMark::ProgressMark(std::string checkpoint_dir)
    : path_(checkpoint_dir.empty() ? "" : mark_path(checkpoint_dir)) {}

void ProgressMark::step_done(std::uint64_t epoch, std::size_t step, std::size_t steps) {
  const auto now = std::chrono::steady_clock::now();
  if (path_.empty() || now - written_ < kEvery) return;
  written_ = now;
  // Written whole and renamed, so a reader never sees half a line.
  const std::string temporary = path_ + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << epoch << " " << step << " " << steps << "\n";
    if (!out.flush()) return;
  }
  std::error_code ignored;
  std::filesystem::rename(temporary, path_, ignored);
}

std::string ProgressMark::trained_again(const std::string& checkpoint_dir, std::uint64_t epochs_done,
                                        std::uint64_t steps_done) {
  std::ifstream in(mark_path(checkpoint_dir));
  std::uint64_t epoch = 0, step = 0, steps = 0;
  if (!(in >> epoch >> step >> steps) || steps == 0 || step > steps) return "";
  const std::uint64_t reached = epoch * steps + step, resumed = epochs_done * steps + steps_done;
  if (reached <= resumed) return "";
  char text[160];
  std::snprintf(text, sizeof text,
                "; the run before it reached epoch %llu, step %llu of %llu at least: %llu steps or more trained again",
                static_cast<unsigned long long>(epoch + 1), static_cast<unsigned long long>(step),
                static_cast<unsigned long long>(steps), static_cast<unsigned long long>(reached - resumed));
  return text;
}

}  // namespace ddl
