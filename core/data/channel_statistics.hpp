// Per-channel mean and standard deviation of pixels in pixel/255 units, summed as images come: a dataset's
// statistics for --normalize meanstd, over all of a pixel dataset or a sample of an encoded one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace ddl {

class ChannelStatistics {
 public:
  explicit ChannelStatistics(int channels)
      : sum_(static_cast<std::size_t>(channels), 0.0), squares_(static_cast<std::size_t>(channels), 0.0) {}
  // Interleaved pixels, channels() values each.
  void add(std::span<const std::uint8_t> pixels) {
    const std::size_t c = sum_.size();
    for (std::size_t i = 0; i < pixels.size(); ++i) {
      const double v = pixels[i] / 255.0;
      sum_[i % c] += v;
      squares_[i % c] += v * v;
    }
    count_ += static_cast<double>(pixels.size() / c);
  }
  void merge(const ChannelStatistics& other) {
    for (std::size_t k = 0; k < sum_.size(); ++k) {
      sum_[k] += other.sum_[k];
      squares_[k] += other.squares_[k];
    }
    count_ += other.count_;
  }
  std::vector<double> mean() const {
    std::vector<double> out(sum_.size());
    for (std::size_t k = 0; k < sum_.size(); ++k) out[k] = sum_[k] / count_;
    return out;
  }
  std::vector<double> stddev() const {
    std::vector<double> out(sum_.size());
    for (std::size_t k = 0; k < sum_.size(); ++k) {
      const double m = sum_[k] / count_;
      out[k] = std::sqrt(std::max(squares_[k] / count_ - m * m, 1e-12));
    }
    return out;
  }

 private:
  std::vector<double> sum_, squares_;
  double count_ = 0;
};

}  // namespace ddl
