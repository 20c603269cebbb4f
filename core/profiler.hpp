// Wall time per layer and direction, summed over steps; the Model feeds it when one is attached
// (`ddl_train --profile`). CPU primitives run synchronously, so timing around execute() is exact.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ddl {

class Profiler {
 public:
  struct Entry {
    std::string layer;
    double forward_s = 0.0;
    double backward_s = 0.0;
    std::size_t steps = 0;
  };
  using clock = std::chrono::steady_clock;

  void resize(const std::vector<std::string>& layer_names) {
    if (entries_.size() == layer_names.size()) return;
    entries_.clear();
    for (const auto& n : layer_names) entries_.push_back({n});
  }
  void add_forward(std::size_t layer, clock::duration d) {
    entries_[layer].forward_s += std::chrono::duration<double>(d).count();
    ++entries_[layer].steps;
  }
  void add_backward(std::size_t layer, clock::duration d) {
    entries_[layer].backward_s += std::chrono::duration<double>(d).count();
  }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

}  // namespace ddl
