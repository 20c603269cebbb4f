// Read access to a dataset in the ddl HDF5 image format, one file or several shards, by global image index.
// Opening validates the whole structure (format, version, shapes, counts, label range, shard continuity)
// so that bad input fails at start with one message, not in the middle of training. Labels (4 bytes an
// image) are read at open; pixels are read only for the indices asked for.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/data/hdf5.hpp"

namespace ddl {

class ImageDataset {
 public:
  // path: a single-file dataset, any one of its shard files, or the base name the shards were written
  // under (data/train.h5 for data/train-0000i-of-0000K.h5).
  explicit ImageDataset(const std::string& path);

  std::size_t size() const { return labels_.size(); }
  // Whether the images are JPEG files (format version 2, ddl_data import --store encoded), each of its own
  // size, rather than pixels of one size.
  bool encoded() const { return encoded_; }
  // Of every image; 0 for an encoded dataset, whose sizes are each image's (image_height, image_width).
  int height() const { return height_; }
  int width() const { return width_; }
  int channels() const { return channels_; }
  std::size_t image_bytes() const { return static_cast<std::size_t>(height_) * width_ * channels_; }
  int image_height(std::size_t index) const { return encoded_ ? sizes_[2 * index] : height_; }
  int image_width(std::size_t index) const { return encoded_ ? sizes_[2 * index + 1] : width_; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  std::size_t num_classes() const { return class_names_.size(); }
  const std::vector<std::int32_t>& labels() const { return labels_; }
  const std::vector<double>& channel_mean() const { return mean_; }
  const std::vector<double>& channel_std() const { return std_; }
  const std::vector<std::string>& files() const { return files_; }
  // The file (shard) that holds image `index`.
  const std::string& file_of(std::size_t index) const { return files_[shard_of(index)]; }
  std::size_t shard_size(std::size_t shard) const { return shard_begin_[shard + 1] - shard_begin_[shard]; }

  // Reads the images with these global indices, in this order, into `pixels` (indices.size() images of
  // image_bytes(), [N, H, W, C]). Not thread-safe: one reader per thread. A file cut short since it was
  // opened is an InputError: HDF5 would read the missing bytes as zeros.
  void read(std::span<const std::size_t> indices, std::span<std::uint8_t> pixels);
  // An encoded dataset's image `index`: its JPEG file's bytes, into `bytes` (resized to them).
  void read_encoded(std::size_t index, std::vector<std::uint8_t>& bytes);
  // Images `indices` into bytes[k] for indices[k]: read in the file's order, images that lie one after
  // another in one read each run of them.
  void read_encoded(std::span<const std::size_t> indices, std::vector<std::vector<std::uint8_t>>& bytes);

 private:
  struct Shard {
    h5::Handle file, images, file_space;  // images: /images, or /encoded
    std::uintmax_t bytes_at_open = 0;
    bool chunk_per_image = false;  // unfiltered chunks of one image each: read whole, past HDF5's selections
    std::vector<std::int64_t> offsets;  // encoded: image i's bytes are [offsets[i], offsets[i + 1])
  };
  // Each checks one file's structure and returns its labels.
  std::vector<std::int32_t> open_pixels(Shard& shard, const std::string& f, bool first);
  std::vector<std::int32_t> open_encoded(Shard& shard, const std::string& f);
  std::size_t shard_of(std::size_t index) const;
  // Bytes [start, start + count) of shard s's /encoded into `out`.
  void read_bytes(std::size_t s, hsize_t start, hsize_t count, std::uint8_t* out, std::size_t index);
  void check_not_cut_short(std::size_t shard) const;
  std::vector<std::string> files_;
  std::vector<Shard> shards_;
  std::vector<std::size_t> shard_begin_;  // global index of each shard's first image, plus the total
  std::vector<std::string> class_names_;
  std::vector<std::int32_t> labels_;
  std::vector<double> mean_, std_;
  int height_ = 0, width_ = 0, channels_ = 0;
  bool encoded_ = false;
  std::vector<std::int32_t> sizes_;  // encoded: each image's height and width
  h5::Handle one_image_space_;
};

}  // namespace ddl
