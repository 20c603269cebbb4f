#include "core/data/image_set.hpp"

#include <cstring>
#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace ddl {
namespace {

ImageSet subset(const ImageSet& all, const std::vector<std::size_t>& order, std::size_t begin, std::size_t end) {
  ImageSet out{all.height, all.width, all.channels, all.class_names, {}, {}};
  const std::size_t bytes = all.image_bytes();
  out.pixels.resize((end - begin) * bytes);
  out.labels.resize(end - begin);
  for (std::size_t i = begin; i < end; ++i) {
    std::memcpy(out.pixels.data() + (i - begin) * bytes, all.pixels.data() + order[i] * bytes, bytes);
    out.labels[i - begin] = all.labels[order[i]];
  }
  return out;
}

}  // namespace

std::vector<std::size_t> shuffled_order(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  Rng rng = Rng::derived(seed, 0x5e1);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

std::pair<ImageSet, ImageSet> shuffle_split(const ImageSet& all, double validation_fraction, std::uint64_t seed) {
  if (!(validation_fraction >= 0.0 && validation_fraction < 1.0))
    throw InputError("validation fraction must be in [0, 1), got " + std::to_string(validation_fraction));
  const std::vector<std::size_t> order = shuffled_order(all.size(), seed);
  const auto n_val = static_cast<std::size_t>(validation_fraction * static_cast<double>(all.size()));
  return {subset(all, order, n_val, all.size()), subset(all, order, 0, n_val)};
}

}  // namespace ddl
