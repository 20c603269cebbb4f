// An in-memory set of same-sized images with labels: what an importer produces and the dataset writer
// stores. Pixels are uint8, [N, H, W, C] row-major, as the HDF5 format keeps them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddl {

struct ImageSet {
  int height = 0, width = 0, channels = 0;
  std::vector<std::string> class_names;
  std::vector<std::uint8_t> pixels;
  std::vector<std::int32_t> labels;

  std::size_t image_bytes() const { return static_cast<std::size_t>(height) * width * channels; }
  std::size_t size() const { return labels.size(); }
};

// Splits off a random fraction for validation: returns {train, validation}, both in the shuffled order
// that the seed defines (so shards and both parts are class-balanced in expectation).
std::pair<ImageSet, ImageSet> shuffle_split(const ImageSet& all, double validation_fraction, std::uint64_t seed);
// The order shuffle_split puts n images in: the validation part is its first fraction, the rest is training.
std::vector<std::size_t> shuffled_order(std::size_t n, std::uint64_t seed);

}  // namespace ddl
