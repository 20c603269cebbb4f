// The pixels of a fixed set of a dataset's images, read once and then served from memory. For training sets
// that fit: reading each batch from the file again costs the loader CPU time every step, and on a small
// machine the loader shares its cores with the step (on two cores a quarter of the gap to the plain oneDNN
// chain was the loader's HDF5 reads).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/data/image_dataset.hpp"

namespace ddl {

class ImageCache {
 public:
  // Reads the images with these global indices from `reader`, in file order.
  ImageCache(ImageDataset& reader, std::span<const std::size_t> indices);

  // The image's pixels (H x W x C), or nullptr when this cache does not hold it.
  const std::uint8_t* find(std::size_t index) const {
    return index < slot_.size() && slot_[index] != kNone ? pixels_.get() + slot_[index] * image_bytes_ : nullptr;
  }
  std::size_t images() const { return images_; }
  std::size_t bytes() const { return images_ * image_bytes_; }

 private:
  static constexpr std::uint32_t kNone = ~std::uint32_t{0};
  std::size_t image_bytes_ = 0, images_ = 0;
  std::vector<std::uint32_t> slot_;           // by global index: where the image is in pixels_, or kNone
  std::unique_ptr<std::uint8_t[]> pixels_;  // not zeroed first: every byte is read into
};

}  // namespace ddl
