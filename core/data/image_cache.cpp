#include "core/data/image_cache.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace ddl {

ImageCache::ImageCache(ImageDataset& reader, std::span<const std::size_t> indices)
    : image_bytes_(reader.image_bytes()), slot_(reader.size(), kNone) {
  std::vector<std::size_t> held(indices.begin(), indices.end());
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  if (held.size() >= kNone) throw InputError("cannot keep " + std::to_string(held.size()) + " images in memory");
  if (!held.empty() && held.back() >= reader.size())
    throw Error("ImageCache: index " + std::to_string(held.back()) + " out of range");
  images_ = held.size();
  pixels_.reset(new std::uint8_t[images_ * image_bytes_]);
  constexpr std::size_t kRead = 256;  // images a read: sequential in the file, few calls
  for (std::size_t begin = 0; begin < images_; begin += kRead) {
    const std::size_t n = std::min(kRead, images_ - begin);
    reader.read(std::span(held).subspan(begin, n), std::span(pixels_.get() + begin * image_bytes_, n * image_bytes_));
  }
  for (std::size_t s = 0; s < images_; ++s) slot_[held[s]] = static_cast<std::uint32_t>(s);
}

}  // namespace ddl
