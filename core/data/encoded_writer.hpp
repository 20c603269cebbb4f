// Writes one file of an encoded dataset (dataset_format.hpp, version 2) as images arrive: their JPEG bytes
// appended to /encoded, their offsets, sizes and labels kept and written at the end with the attributes.
// The file is written to <path>.tmp and renamed into place by finish(); a writer destroyed unfinished (an
// error, an interrupted import) removes its temporary file, so no half-written dataset is ever left under
// the dataset's name, and a new import starts over cleanly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/data/hdf5.hpp"

namespace ddl {

struct EncodedImage {
  std::vector<std::uint8_t> bytes;  // a JPEG file
  int height = 0, width = 0;
  std::int32_t label = 0;
};

// Where a file stands among the dataset's shards (first_index: the global index of its first image).
struct ShardPlace {
  int index = 0, count = 1;
  std::size_t first_index = 0, total_images = 0;
};

class EncodedShardWriter {
 public:
  // chunk_bytes: the /encoded dataset's chunk, about one image, so that reading an image reads little else.
  EncodedShardWriter(std::string path, const ShardPlace& place, std::vector<std::string> class_names,
                     std::size_t chunk_bytes);
  ~EncodedShardWriter();
  EncodedShardWriter(const EncodedShardWriter&) = delete;
  EncodedShardWriter& operator=(const EncodedShardWriter&) = delete;

  void append(std::span<const EncodedImage> images);
  // Per-channel mean and standard deviation in pixel/255 units (the dataset's, for --normalize meanstd).
  void finish(const std::vector<double>& mean, const std::vector<double>& stddev);
  std::size_t images() const { return labels_.size(); }
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(offsets_.back()); }

 private:
  std::string path_, tmp_;
  ShardPlace place_;
  std::vector<std::string> class_names_;
  h5::Handle file_, encoded_;
  std::vector<std::int64_t> offsets_{0};
  std::vector<std::int32_t> sizes_, labels_;
  std::vector<std::uint8_t> buffer_;
  bool finished_ = false;
};

}  // namespace ddl
