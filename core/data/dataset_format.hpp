// The HDF5 image dataset format (docs/data-format.md has the full description). Version 1 holds pixels:
//   /images  uint8 [N, H, W, C], chunked by whole images      /labels  int32 [N]
// version 2 the images' JPEG files as they are (ddl_data import --store encoded):
//   /encoded uint8 [bytes], the files one after another       /offsets int64 [N + 1]: image i is bytes
//   [offsets[i], offsets[i + 1])                              /sizes int32 [N, 2]: height, width
//   /labels  int32 [N]
//   attributes: ddl_format = "ddl-images", format_version, class_names, shard_index, shard_count,
//   first_index, total_images, channel_mean, channel_std (over the whole dataset, pixel/255 units).
// A dataset of K > 1 shards is stored as <stem>-00000-of-0000K.h5 ... next to each other.
#pragma once

#include <string>

namespace ddl::dataset_format {

inline constexpr const char* kMagic = "ddl-images";
inline constexpr int kVersion = 1;
inline constexpr const char* kImages = "images";
inline constexpr const char* kLabels = "labels";
inline constexpr int kEncodedVersion = 2;
inline constexpr const char* kEncoded = "encoded";
inline constexpr const char* kOffsets = "offsets";
inline constexpr const char* kSizes = "sizes";

// "<dir>/<stem>-00001-of-00004.h5" for a base path "<dir>/<stem>.h5"; the base path itself when count is 1.
std::string shard_path(const std::string& base, int index, int count);

}  // namespace ddl::dataset_format
