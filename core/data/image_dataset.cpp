#include "core/data/image_dataset.hpp"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <regex>

#include "core/data/dataset_format.hpp"
#include "core/error.hpp"

namespace ddl {
namespace fs = std::filesystem;
namespace fmt = dataset_format;

namespace {

// Larger sides are no image ddl trains on; bounding them keeps every size within an int.
constexpr hsize_t kMaxSide = 1 << 20;

// The list of files that make up the dataset named by `path`.
std::vector<std::string> dataset_files(const std::string& path) {
  if (fs::exists(path)) {
    h5::Handle file = h5::open_file(path);
    if (!h5::has_attribute(file, "shard_count")) return {path};
    const auto count = h5::read_int_attribute(file, "shard_count", path);
    const auto index = h5::read_int_attribute(file, "shard_index", path);
    if (count <= 1) return {path};
    // Recover the base name by stripping this shard's own "-iiiii-of-kkkkk".
    fs::path p(path);
    std::smatch m;
    const std::string stem = p.stem().string();
    if (!std::regex_match(stem, m, std::regex(R"((.*)-(\d{5})-of-(\d{5}))")) || std::stoll(m[2]) != index ||
        std::stoll(m[3]) != count)
      throw InputError(path + ": shard " + std::to_string(index) + " of " + std::to_string(count) +
                       " but its name does not follow <stem>-iiiii-of-kkkkk");
    const std::string base = (p.parent_path() / (m[1].str() + p.extension().string())).string();
    std::vector<std::string> files;
    for (int i = 0; i < count; ++i) files.push_back(fmt::shard_path(base, i, static_cast<int>(count)));
    return files;
  }
  // A base name: look for its first shard.
  fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (fs::is_directory(dir)) {
    const std::string prefix = p.stem().string() + "-00000-of-";
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && entry.path().extension() == p.extension())
        return dataset_files(entry.path().string());
    }
  }
  throw InputError(path + ": no such file (nor shards " + p.stem().string() + "-00000-of-*" + p.extension().string() +
                   ")");
}

}  // namespace

ImageDataset::ImageDataset(const std::string& path) : files_(dataset_files(path)) {
  shard_begin_.push_back(0);
  for (std::size_t s = 0; s < files_.size(); ++s) {
    const std::string& f = files_[s];
    Shard shard;
    shard.file = h5::open_file(f);
    shard.bytes_at_open = h5::file_bytes_on_disk(shard.file, f);
    if (!h5::has_attribute(shard.file, "ddl_format") ||
        h5::read_string_attribute(shard.file, "ddl_format", f) != fmt::kMagic)
      throw InputError(f + ": not a ddl image dataset (no ddl_format attribute); import data with 'ddl_data import'");
    const auto version = h5::read_int_attribute(shard.file, "format_version", f);
    if (version != fmt::kVersion && version != fmt::kEncodedVersion)
      throw InputError(f + ": dataset format version " + std::to_string(version) + ", this ddl reads versions " +
                       std::to_string(fmt::kVersion) + " and " + std::to_string(fmt::kEncodedVersion));
    if (s == 0) encoded_ = version == fmt::kEncodedVersion;
    if (encoded_ != (version == fmt::kEncodedVersion))
      throw InputError(f + ": holds " + (encoded_ ? "pixels" : "encoded images") + ", " + files_[0] + " the other");
    const auto labels = encoded_ ? open_encoded(shard, f) : open_pixels(shard, f, s == 0);
    auto names = h5::read_strings_attribute(shard.file, "class_names", f);
    if (s == 0) {
      class_names_ = names;
      mean_ = h5::read_doubles_attribute(shard.file, "channel_mean", f);
      std_ = h5::read_doubles_attribute(shard.file, "channel_std", f);
    } else if (names != class_names_) {
      throw InputError(f + ": image shape or class names differ from " + files_[0]);
    }
    if (h5::has_attribute(shard.file, "first_index") &&
        h5::read_int_attribute(shard.file, "first_index", f) != static_cast<std::int64_t>(shard_begin_.back()))
      throw InputError(f + ": shard does not continue where the previous one ended");
    const std::size_t first = shard_begin_.back();
    for (std::size_t i = 0; i < labels.size(); ++i)
      if (labels[i] < 0 || static_cast<std::size_t>(labels[i]) >= names.size())
        throw InputError(f + ": label " + std::to_string(labels[i]) + " of image " + std::to_string(first + i) +
                         " is outside [0, " + std::to_string(names.size()) + ")");
    labels_.insert(labels_.end(), labels.begin(), labels.end());
    shard.file_space = h5::Handle(h5::check_id(H5Dget_space(shard.images.get()), "H5Dget_space", f));
    shard_begin_.push_back(labels_.size());
    shards_.push_back(std::move(shard));
  }
  if (labels_.empty()) throw InputError(path + ": the dataset holds no images");
  if (class_names_.empty()) throw InputError(path + ": the dataset names no classes");
  if (mean_.size() != static_cast<std::size_t>(channels_) || std_.size() != static_cast<std::size_t>(channels_))
    throw InputError(path + ": channel_mean/channel_std do not match the channel count");
  const hsize_t one[4] = {1, static_cast<hsize_t>(height_), static_cast<hsize_t>(width_),
                          static_cast<hsize_t>(channels_)};
  if (!encoded_)
    one_image_space_ = h5::Handle(h5::check_id(H5Screate_simple(4, one, nullptr), "H5Screate_simple", path));
}

std::vector<std::int32_t> ImageDataset::open_pixels(Shard& shard, const std::string& f, bool first) {
  shard.images = h5::open_dataset(shard.file, fmt::kImages, f);
  const auto shape = h5::dataset_shape(shard.images, f);
  if (shape.size() != 4)
    throw InputError(f + ": images must be [N, H, W, C], found " + std::to_string(shape.size()) + " dimensions");
  // Pixels are stored uncompressed, so a file smaller than the pixels it claims is damaged; the claim must
  // not size the loader's buffers (nor overflow the int sizes below).
  hsize_t pixel_bytes = 1;
  for (std::size_t d = 0; d < 4; ++d) {
    if (d > 0 && (shape[d] < 1 || shape[d] > kMaxSide))
      throw InputError(f + ": images are " + std::to_string(shape[1]) + "x" + std::to_string(shape[2]) + "x" +
                       std::to_string(shape[3]) + " (H x W x C), not an image size (corrupt file?)");
    if (__builtin_mul_overflow(pixel_bytes, shape[d], &pixel_bytes)) pixel_bytes = ~hsize_t{0};
  }
  if (pixel_bytes > h5::file_size(shard.file, f))
    throw InputError(f + ": " + std::to_string(shape[0]) + " images of " + std::to_string(shape[1]) + "x" +
                     std::to_string(shape[2]) + "x" + std::to_string(shape[3]) +
                     " take more bytes than the file holds (truncated or corrupt)");
  auto labels = h5::read_dataset<std::int32_t>(shard.file, fmt::kLabels, f);
  if (labels.size() != shape[0])
    throw InputError(f + ": " + std::to_string(shape[0]) + " images but " + std::to_string(labels.size()) + " labels");
  if (first) {
    height_ = static_cast<int>(shape[1]);
    width_ = static_cast<int>(shape[2]);
    channels_ = static_cast<int>(shape[3]);
  } else if (shape[1] != static_cast<hsize_t>(height_) || shape[2] != static_cast<hsize_t>(width_) ||
             shape[3] != static_cast<hsize_t>(channels_)) {
    throw InputError(f + ": image shape or class names differ from " + files_[0]);
  }
  const h5::Handle create(h5::check_id(H5Dget_create_plist(shard.images.get()), "H5Dget_create_plist", f));
  const h5::Handle type(h5::check_id(H5Dget_type(shard.images.get()), "H5Dget_type", f));
  hsize_t chunk[4] = {};
  // Raw chunks hold the stored bytes as they are: only one-byte integers need no conversion.
  shard.chunk_per_image = H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 1 &&
                          H5Pget_layout(create.get()) == H5D_CHUNKED && H5Pget_nfilters(create.get()) == 0 &&
                          H5Pget_chunk(create.get(), 4, chunk) == 4 && chunk[0] == 1 && chunk[1] == shape[1] &&
                          chunk[2] == shape[2] && chunk[3] == shape[3];
  return labels;
}

// Offsets that rise from 0 to the stored bytes, which the file holds, and sizes of real images: a damaged
// file is refused here, and no claim of it sizes a buffer unchecked.
std::vector<std::int32_t> ImageDataset::open_encoded(Shard& shard, const std::string& f) {
  channels_ = 3;
  shard.images = h5::open_dataset(shard.file, fmt::kEncoded, f);
  const auto bytes = h5::dataset_shape(shard.images, f);
  if (bytes.size() != 1) throw InputError(f + ": /encoded is not one row of bytes (corrupt file?)");
  auto labels = h5::read_dataset<std::int32_t>(shard.file, fmt::kLabels, f);
  shard.offsets = h5::read_dataset<std::int64_t>(shard.file, fmt::kOffsets, f);
  const auto sizes = h5::read_dataset<std::int32_t>(shard.file, fmt::kSizes, f);
  const std::size_t n = labels.size();
  if (shard.offsets.size() != n + 1 || sizes.size() != 2 * n)
    throw InputError(f + ": " + std::to_string(n) + " labels, " + std::to_string(shard.offsets.size()) +
                     " offsets and " + std::to_string(sizes.size() / 2) + " sizes (corrupt file?)");
  if (shard.offsets[0] != 0 || static_cast<hsize_t>(shard.offsets[n]) != bytes[0] ||
      bytes[0] > h5::file_size(shard.file, f))
    throw InputError(f + ": the encoded images' offsets do not match their " + std::to_string(bytes[0]) +
                     " bytes, or the file holds fewer (truncated or corrupt)");
  for (std::size_t i = 0; i < n; ++i) {
    if (shard.offsets[i + 1] <= shard.offsets[i])
      throw InputError(f + ": image " + std::to_string(i) + " has no bytes (corrupt offsets)");
    for (int k = 0; k < 2; ++k)
      if (sizes[2 * i + k] < 1 || static_cast<hsize_t>(sizes[2 * i + k]) > kMaxSide)
        throw InputError(f + ": image " + std::to_string(i) + " is " + std::to_string(sizes[2 * i]) + "x" +
                         std::to_string(sizes[2 * i + 1]) + ", not an image size (corrupt file?)");
  }
  sizes_.insert(sizes_.end(), sizes.begin(), sizes.end());
  return labels;
}

std::size_t ImageDataset::shard_of(std::size_t index) const {
  if (index >= size()) throw Error("image index " + std::to_string(index) + " out of range");
  return std::upper_bound(shard_begin_.begin(), shard_begin_.end(), index) - shard_begin_.begin() - 1;
}

// Checked after reads, so that images read from a file cut short meanwhile are never used.
void ImageDataset::check_not_cut_short(std::size_t s) const {
  const std::uintmax_t now = h5::file_bytes_on_disk(shards_[s].file, files_[s]);
  if (now < shards_[s].bytes_at_open)
    throw InputError(files_[s] + ": the file was cut short while it was being read (" + std::to_string(now) + " of " +
                     std::to_string(shards_[s].bytes_at_open) + " bytes left)");
}

void ImageDataset::read_bytes(std::size_t s, hsize_t start, hsize_t count, std::uint8_t* out, std::size_t index) {
  const Shard& shard = shards_[s];
  h5::check(H5Sselect_hyperslab(shard.file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
            "H5Sselect_hyperslab", files_[s]);
  const h5::Handle memory(h5::check_id(H5Screate_simple(1, &count, nullptr), "H5Screate_simple", files_[s]));
  if (H5Dread(shard.images.get(), H5T_NATIVE_UINT8, memory.get(), shard.file_space.get(), H5P_DEFAULT, out) < 0)
    throw InputError(files_[s] + ": cannot read image " + std::to_string(index) + " (file corrupt or truncated?)");
}

void ImageDataset::read_encoded(std::size_t index, std::vector<std::uint8_t>& bytes) {
  std::vector<std::vector<std::uint8_t>> one(1);
  one[0].swap(bytes);
  read_encoded(std::span<const std::size_t>(&index, 1), one);
  bytes.swap(one[0]);
}

void ImageDataset::read_encoded(std::span<const std::size_t> indices, std::vector<std::vector<std::uint8_t>>& bytes) {
  if (!encoded_) throw Error("ImageDataset::read_encoded: " + files_[0] + " holds pixels");
  bytes.resize(std::max(bytes.size(), indices.size()));
  std::vector<std::size_t> order(indices.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return indices[a] < indices[b]; });
  std::vector<std::uint8_t> run;
  std::vector<bool> touched(shards_.size());
  for (std::size_t first = 0; first < order.size();) {
    const std::size_t s = shard_of(indices[order[first]]);
    const auto& offsets = shards_[s].offsets;
    const auto local = [&](std::size_t k) { return indices[order[k]] - shard_begin_[s]; };
    // The run: images whose bytes follow each other in the file (the same image twice ends it).
    std::size_t end = first + 1;
    while (end < order.size() && indices[order[end]] == indices[order[end - 1]] + 1 &&
           indices[order[end]] < shard_begin_[s + 1])
      ++end;
    const auto start = static_cast<hsize_t>(offsets[local(first)]);
    const auto stop = static_cast<hsize_t>(offsets[local(end - 1) + 1]);
    run.resize(stop - start);
    read_bytes(s, start, stop - start, run.data(), indices[order[first]]);
    for (std::size_t k = first; k < end; ++k) {
      const auto from = static_cast<std::size_t>(offsets[local(k)]) - start;
      const auto to = static_cast<std::size_t>(offsets[local(k) + 1]) - start;
      bytes[order[k]].assign(run.begin() + static_cast<std::ptrdiff_t>(from),
                             run.begin() + static_cast<std::ptrdiff_t>(to));
    }
    touched[s] = true;
    first = end;
  }
  for (std::size_t s = 0; s < shards_.size(); ++s)
    if (touched[s]) check_not_cut_short(s);
}

void ImageDataset::read(std::span<const std::size_t> indices, std::span<std::uint8_t> pixels) {
  if (encoded_) throw Error("ImageDataset::read: " + files_[0] + " holds encoded images");
  const std::size_t bytes = image_bytes();
  if (pixels.size() != indices.size() * bytes) throw Error("ImageDataset::read: output buffer has the wrong size");
  const hsize_t count[4] = {1, static_cast<hsize_t>(height_), static_cast<hsize_t>(width_),
                            static_cast<hsize_t>(channels_)};
  std::vector<bool> touched(shards_.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::size_t index = indices[k];
    const std::size_t s = shard_of(index);
    const Shard& shard = shards_[s];
    touched[s] = true;
    const hsize_t start[4] = {index - shard_begin_[s], 0, 0, 0};
    if (shard.chunk_per_image) {
      // H5Dread_chunk writes as many bytes as the file's chunk index claims: checked first, so that a
      // corrupt index cannot write past this image.
      hsize_t stored = 0;
      std::uint32_t filters = 0;
      if (H5Dget_chunk_storage_size(shard.images.get(), start, &stored) < 0 || stored != bytes ||
          H5Dread_chunk(shard.images.get(), H5P_DEFAULT, start, &filters, pixels.data() + k * bytes) < 0)
        throw InputError(files_[s] + ": cannot read image " + std::to_string(index) + " (file corrupt or truncated?)");
      continue;
    }
    h5::check(H5Sselect_hyperslab(shard.file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr),
              "H5Sselect_hyperslab", files_[s]);
    if (H5Dread(shard.images.get(), H5T_NATIVE_UINT8, one_image_space_.get(), shard.file_space.get(), H5P_DEFAULT,
                pixels.data() + k * bytes) < 0)
      throw InputError(files_[s] + ": cannot read image " + std::to_string(index) + " (file corrupt or truncated?)");
  }
  // One fstat for each shard this batch read from.
  for (std::size_t s = 0; s < shards_.size(); ++s)
    if (touched[s]) check_not_cut_short(s);
}

}  // namespace ddl
