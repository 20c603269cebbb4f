#include "core/data/encoded_writer.hpp"

#include <algorithm>
#include <filesystem>

#include "core/data/dataset_format.hpp"
#include "core/error.hpp"

namespace ddl {

namespace fmt = dataset_format;

EncodedShardWriter::EncodedShardWriter(std::string path, const ShardPlace& place, std::vector<std::string> class_names,
                                       std::size_t chunk_bytes)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), place_(place), class_names_(std::move(class_names)) {
  if (std::filesystem::is_directory(path_)) throw InputError(path_ + ": is a directory, not a dataset file name");
  file_ = h5::create_file(tmp_);
  const hsize_t none = 0, unlimited = H5S_UNLIMITED, chunk = std::max<std::size_t>(chunk_bytes, 1);
  h5::Handle space(h5::check_id(H5Screate_simple(1, &none, &unlimited), "H5Screate_simple", tmp_));
  h5::Handle props(h5::check_id(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", tmp_));
  h5::check(H5Pset_chunk(props.get(), 1, &chunk), "H5Pset_chunk", tmp_);
  encoded_ = h5::Handle(h5::check_id(
      H5Dcreate2(file_.get(), fmt::kEncoded, H5T_NATIVE_UINT8, space.get(), H5P_DEFAULT, props.get(), H5P_DEFAULT),
      "cannot create the encoded images' dataset", tmp_));
}

EncodedShardWriter::~EncodedShardWriter() {
  if (finished_) return;
  encoded_ = {};
  file_ = {};
  std::error_code ignored;
  std::filesystem::remove(tmp_, ignored);
}

void EncodedShardWriter::append(std::span<const EncodedImage> images) {
  buffer_.clear();
  for (const EncodedImage& image : images) {
    buffer_.insert(buffer_.end(), image.bytes.begin(), image.bytes.end());
    offsets_.push_back(offsets_.back() + static_cast<std::int64_t>(image.bytes.size()));
    sizes_.push_back(image.height);
    sizes_.push_back(image.width);
    labels_.push_back(image.label);
  }
  if (buffer_.empty()) return;
  const hsize_t start = static_cast<hsize_t>(offsets_.back()) - buffer_.size(), count = buffer_.size();
  const hsize_t end = start + count;
  h5::check(H5Dset_extent(encoded_.get(), &end), "cannot grow the encoded images' dataset", tmp_);
  h5::Handle file_space(h5::check_id(H5Dget_space(encoded_.get()), "H5Dget_space", tmp_));
  h5::check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
            "H5Sselect_hyperslab", tmp_);
  h5::Handle memory(h5::check_id(H5Screate_simple(1, &count, nullptr), "H5Screate_simple", tmp_));
  h5::check(H5Dwrite(encoded_.get(), H5T_NATIVE_UINT8, memory.get(), file_space.get(), H5P_DEFAULT, buffer_.data()),
            "cannot write images", tmp_);
}

void EncodedShardWriter::finish(const std::vector<double>& mean, const std::vector<double>& stddev) {
  const hsize_t n = labels_.size();
  if (n == 0) throw InputError("refusing to write an empty dataset to " + path_);
  h5::write_dataset<std::int64_t>(file_, fmt::kOffsets, std::span<const std::int64_t>(offsets_), {n + 1});
  h5::write_dataset<std::int32_t>(file_, fmt::kSizes, std::span<const std::int32_t>(sizes_), {n, 2});
  h5::write_dataset<std::int32_t>(file_, fmt::kLabels, std::span<const std::int32_t>(labels_), {n});
  h5::write_attribute(file_, "ddl_format", std::string(fmt::kMagic));
  h5::write_attribute(file_, "format_version", std::int64_t{fmt::kEncodedVersion});
  h5::write_attribute(file_, "encoding", std::string("jpeg"));
  h5::write_attribute(file_, "class_names", class_names_);
  h5::write_attribute(file_, "shard_index", std::int64_t{place_.index});
  h5::write_attribute(file_, "shard_count", std::int64_t{place_.count});
  h5::write_attribute(file_, "first_index", static_cast<std::int64_t>(place_.first_index));
  h5::write_attribute(file_, "total_images", static_cast<std::int64_t>(place_.total_images));
  h5::write_attribute(file_, "channel_mean", mean);
  h5::write_attribute(file_, "channel_std", stddev);
  h5::flush(file_, tmp_);
  encoded_ = {};
  file_ = {};
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) throw Error("cannot rename " + tmp_ + " to " + path_ + ": " + ec.message());
  finished_ = true;
}

}  // namespace ddl
