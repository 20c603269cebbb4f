// Fuzz target: an image dataset as ddl_train and ddl_data info open it (ImageDataset validates it all), then
// every image read as the loader reads them. The input chooses a valid dataset (1 to 6 images of up to 4x4,
// 1 to 4 classes, 1 to 3 shards; pixels, or the images as JPEG files, whose stored bytes are then decoded as
// the loader decodes a crop), then edits one of its files (hdf5_edits.hpp: any attribute or dataset
// removed or replaced by another type, count, shape or content), then whether the dataset is opened by its
// base name or by one shard's name.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/data/dataset_format.hpp"
#include "core/data/dataset_writer.hpp"
#include "core/data/encoded_writer.hpp"
#include "core/data/hdf5.hpp"
#include "core/data/image_dataset.hpp"
#include "core/data/jpeg_encode.hpp"
#include "core/data/jpeg_region.hpp"
#include "tests/fuzz/fuzz_input.hpp"
#include "tests/fuzz/hdf5_edits.hpp"

namespace {

const ddl::fuzz::Hdf5Names kNames = {{"ddl_format", "format_version", "class_names", "shard_index", "shard_count",
                                      "first_index", "total_images", "channel_mean", "channel_std", "encoding"},
                                     {"images", "labels", "encoded", "offsets", "sizes"}};

// The set as an encoded dataset (format version 2), written as ddl_data import --store encoded writes it.
void write_encoded(const ddl::ImageSet& set, const std::string& base, int shards) {
  for (int s = 0; s < shards; ++s) {
    const std::size_t begin = set.size() * s / shards, end = set.size() * (s + 1) / shards;
    std::vector<ddl::EncodedImage> images;
    for (std::size_t i = begin; i < end; ++i)
      images.push_back({ddl::encode_jpeg(set.pixels.data() + i * set.image_bytes(), set.height, set.width, 90),
                        set.height, set.width, set.labels[i]});
    ddl::EncodedShardWriter writer(ddl::dataset_format::shard_path(base, s, shards), {s, shards, begin, set.size()},
                                   set.class_names, 64);
    writer.append(images);
    writer.finish({0.5, 0.5, 0.5}, {0.25, 0.25, 0.25});
  }
}

ddl::ImageSet image_set(FuzzedDataProvider& in) {
  ddl::ImageSet set;
  const auto n = in.ConsumeIntegralInRange<std::size_t>(1, 6);
  set.height = in.ConsumeIntegralInRange(1, 4);
  set.width = in.ConsumeIntegralInRange(1, 4);
  set.channels = 3;
  const int classes = in.ConsumeIntegralInRange(1, 4);
  for (int c = 0; c < classes; ++c) set.class_names.push_back("c" + std::to_string(c));
  for (std::size_t i = 0; i < n; ++i) set.labels.push_back(static_cast<std::int32_t>(i % classes));
  set.pixels.resize(n * set.image_bytes());
  for (std::size_t i = 0; i < set.pixels.size(); ++i) set.pixels[i] = static_cast<std::uint8_t>(i * 37);
  return set;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ddl::h5::no_cleanup_at_exit();
  ddl::fuzz::set_up_hdf5();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  FuzzedDataProvider in(data, size);
  const ddl::ImageSet set = image_set(in);
  const int shards = in.ConsumeIntegralInRange(1, std::min(3, static_cast<int>(set.size())));
  const bool encoded = in.ConsumeBool();
  // Each of the few hundred valid datasets is written once and copied: writing takes most of an input's time.
  const std::string key = std::to_string(set.size()) + "x" + std::to_string(set.height) + "x" +
                          std::to_string(set.width) + "_" + std::to_string(set.class_names.size()) + "_" +
                          std::to_string(shards) + (encoded ? "_encoded" : "");
  const std::string valid = ddl::fuzz::scratch() + "/valid/" + key, dir = ddl::fuzz::scratch() + "/dataset";
  if (!fs::exists(valid)) {
    fs::create_directories(valid);
    encoded ? write_encoded(set, valid + "/d.h5", shards)
            : (void)ddl::write_image_dataset(set, valid + "/d.h5", shards);
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  fs::copy(valid, dir);
  const std::string base = dir + "/d.h5";
  const int edited = in.ConsumeIntegralInRange(0, shards - 1);
  const bool by_base_name = in.ConsumeBool();
  const int opened = in.ConsumeIntegralInRange(0, shards - 1);
  ddl::fuzz::edit_hdf5_file(ddl::dataset_format::shard_path(base, edited, shards), in, kNames);
  ddl::fuzz::expect_success_or_input_error([&] {
    ddl::ImageDataset ds(by_base_name ? base : ddl::dataset_format::shard_path(base, opened, shards));
    std::vector<std::size_t> per_class(ds.num_classes(), 0);
    for (auto label : ds.labels()) ++per_class.at(static_cast<std::size_t>(label));
    std::vector<std::uint8_t> pixels(ds.image_bytes());
    for (std::size_t i = 0; i < ds.size() && !ds.encoded(); ++i) ds.read(std::span<const std::size_t>(&i, 1), pixels);
    for (std::size_t i = 0; i < ds.size() && ds.encoded(); ++i) {
      ds.read_encoded(i, pixels);
      const float h = static_cast<float>(ds.image_height(i)), w = static_cast<float>(ds.image_width(i));
      ddl::decode_jpeg_region(pixels, {0, 0, h, w}, 2, 2, "image " + std::to_string(i));
    }
  });
  ddl::fuzz::expect_no_open_hdf5_objects();
  return 0;
}
