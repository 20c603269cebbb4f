#include "core/data/dataset_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/data/channel_statistics.hpp"
#include "core/data/dataset_format.hpp"
#include "core/data/hdf5.hpp"
#include "core/error.hpp"

namespace ddl {

namespace dataset_format {
std::string shard_path(const std::string& base, int index, int count) {
  if (count == 1) return base;
  std::filesystem::path p(base);
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d", index, count);
  return (p.parent_path() / (p.stem().string() + suffix + p.extension().string())).string();
}
}  // namespace dataset_format

namespace {

void write_file(const ImageSet& set, const std::string& tmp, int index, int count, std::size_t begin, std::size_t end,
                const std::vector<double>& mean, const std::vector<double>& stddev) {
  namespace fmt = dataset_format;
  {
    h5::Handle file = h5::create_file(tmp);
    const hsize_t n = end - begin;
    const std::vector<hsize_t> shape = {n, static_cast<hsize_t>(set.height), static_cast<hsize_t>(set.width),
                                        static_cast<hsize_t>(set.channels)};
    // Chunks of whole images, one image (or a few tiny ones up to 4 KiB): a random image read then touches
    // only its own bytes; larger chunks made reads of shuffled batches 40% slower.
    const hsize_t per_chunk = std::max<hsize_t>(1, std::min<hsize_t>(n, 4096 / set.image_bytes()));
    std::vector<hsize_t> chunk = shape;
    chunk[0] = std::max<hsize_t>(per_chunk, 1);
    h5::Handle space(h5::check_id(H5Screate_simple(4, shape.data(), nullptr), "H5Screate_simple", tmp));
    h5::Handle props(h5::check_id(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", tmp));
    if (n > 0) h5::check(H5Pset_chunk(props.get(), 4, chunk.data()), "H5Pset_chunk", tmp);
    h5::Handle images(h5::check_id(
        H5Dcreate2(file.get(), fmt::kImages, H5T_NATIVE_UINT8, space.get(), H5P_DEFAULT, props.get(), H5P_DEFAULT),
        "cannot create images dataset", tmp));
    if (n > 0)
      h5::check(H5Dwrite(images.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                         set.pixels.data() + begin * set.image_bytes()),
                "cannot write images", tmp);
    h5::write_dataset<std::int32_t>(file, fmt::kLabels, std::span(set.labels).subspan(begin, n), {n});
    h5::write_attribute(file, "ddl_format", std::string(fmt::kMagic));
    h5::write_attribute(file, "format_version", std::int64_t{fmt::kVersion});
    h5::write_attribute(file, "class_names", set.class_names);
    h5::write_attribute(file, "shard_index", std::int64_t{index});
    h5::write_attribute(file, "shard_count", std::int64_t{count});
    h5::write_attribute(file, "first_index", static_cast<std::int64_t>(begin));
    h5::write_attribute(file, "total_images", static_cast<std::int64_t>(set.size()));
    h5::write_attribute(file, "channel_mean", mean);
    h5::write_attribute(file, "channel_std", stddev);
    h5::flush(file, tmp);
  }
}

void write_shard(const ImageSet& set, const std::string& path, int index, int count, std::size_t begin, std::size_t end,
                 const std::vector<double>& mean, const std::vector<double>& stddev) {
  if (std::filesystem::is_directory(path)) throw InputError(path + ": is a directory, not a dataset file name");
  const std::string tmp = path + ".tmp";
  try {
    write_file(set, tmp, index, count, begin, end, mean, stddev);
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw Error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  } catch (...) {
    // A half-written temporary is of no use, and on a full disk it holds the space the user needs back.
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

}  // namespace

void remove_files(const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    std::error_code ignored;
    std::filesystem::remove(p, ignored);
  }
}

std::vector<std::string> write_image_dataset(const ImageSet& set, const std::string& path, int shards) {
  if (shards < 1) throw InputError("shard count must be at least 1");
  if (set.size() == 0) throw InputError("refusing to write an empty dataset to " + path);
  if (static_cast<std::size_t>(shards) > set.size())
    throw InputError("cannot split " + std::to_string(set.size()) + " images into " + std::to_string(shards) +
                     " shards");
  ChannelStatistics statistics(set.channels);
  statistics.add(set.pixels);
  const auto mean = statistics.mean(), stddev = statistics.stddev();
  std::vector<std::string> written;
  try {
    for (int i = 0; i < shards; ++i) {
      const std::size_t begin = set.size() * i / shards, end = set.size() * (i + 1) / shards;
      const std::string p = dataset_format::shard_path(path, i, shards);
      write_shard(set, p, i, shards, begin, end, mean, stddev);
      written.push_back(p);
    }
  } catch (...) {
    remove_files(written);  // the shards written so far are not a dataset without the rest
    throw;
  }
  return written;
}

}  // namespace ddl
