// A one-line progress bar redrawn in place (carriage return) for terminals.
#pragma once

#include <cstdio>
#include <string>

#include "core/train/trainer.hpp"

namespace ddl {

class ProgressBar {
 public:
  ProgressBar(int epoch, int epochs) : epoch_(epoch), epochs_(epochs) {}
  void update(const StepProgress& p) {
    // Redrawing every step would cost more than a small model's step; ~50 updates an epoch suffice.
    if (p.step != p.steps && p.step % std::max<std::size_t>(1, p.steps / 50) != 0) return;
    const int width = 30;
    const int filled = static_cast<int>(width * p.step / std::max<std::size_t>(1, p.steps));
    std::printf("\repoch %d/%d [%s%s] %zu/%zu loss %.4f %.0f img/s ", epoch_, epochs_, std::string(filled, '#').c_str(),
                std::string(width - filled, '.').c_str(), p.step, p.steps, p.loss, p.images_per_second);
    std::fflush(stdout);
  }
  void finish() {
    std::printf("\r%*s\r", 100, "");
    std::fflush(stdout);
  }

 private:
  int epoch_, epochs_;
};

}  // namespace ddl
