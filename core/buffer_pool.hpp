// Storage that is needed only for a while in each step (a layer's input gradient lives from its backward
// until the layer before it has consumed it) is taken from this pool and given back, so a model's peak
// holds the gradients that are alive together rather than one per layer. Single-threaded: layers run
// their backward on the main thread only.
#pragma once

#include <cstddef>
#include <iterator>
#include <vector>

#include "core/aligned_buffer.hpp"

namespace ddl {

class BufferPool {
 public:
  // The smallest free buffer of at least `bytes`, or a new one. Contents are unspecified. A larger buffer
  // serves a smaller request rather than a new one being allocated; when none is large enough, the free
  // ones (all smaller) are released first: a model's gradients grow from layer to layer during backward
  // (VGG16's from 12 to 392 MB at batch 32), and keeping every size would hold their sum, not their peak.
  AlignedBuffer<std::byte> take(std::size_t bytes) {
    if (bytes == 0) return {};
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->size() >= bytes && (best == free_.end() || it->size() < best->size())) best = it;
    if (best == free_.end()) {
      free_.clear();
      return AlignedBuffer<std::byte>(bytes);
    }
    AlignedBuffer<std::byte> buffer = std::move(*best);
    free_.erase(best);
    return buffer;
  }
  void give(AlignedBuffer<std::byte> buffer) {
    if (buffer.size() > 0) free_.push_back(std::move(buffer));
  }

 private:
  std::vector<AlignedBuffer<std::byte>> free_;
};

}  // namespace ddl
