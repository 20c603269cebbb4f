// ImageNet-like JPEG folders from the repository's sample: each image of <sample>/<class>/ scaled to a
// random size of 250-500 pixels a side (bilinear), given a fine texture so that it compresses as photos do
// (about 50-120 KB at quality 90, where a smooth enlargement would take a tenth), and written at quality 90
// to <out>/<class>/. What the loader's tests and benchmarks decode, since ImageNet itself is not here.
//   make_jpeg_folders SAMPLE_DIR OUT_DIR [images per class = 100] [seed = 1]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/data/image_decode.hpp"
#include "core/data/image_folder.hpp"
#include "core/data/image_resize.hpp"
#include "core/data/jpeg_encode.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: make_jpeg_folders SAMPLE_DIR OUT_DIR [images per class] [seed]\n");
    return 2;
  }
  try {
    const std::size_t per_class = argc > 3 ? std::stoul(argv[3]) : 100;
    ddl::Rng rng(argc > 4 ? std::stoull(argv[4]) : 1);
    const ddl::ImageFolderListing sample = ddl::list_image_folder(argv[1]);
    std::vector<std::size_t> written(sample.class_names.size(), 0);
    std::uintmax_t bytes = 0;
    for (std::size_t i = 0; i < sample.files.size(); ++i) {
      const auto label = static_cast<std::size_t>(sample.labels[i]);
      if (written[label] >= per_class) continue;
      const ddl::DecodedImage small = ddl::decode_image(sample.files[i]);
      const int h = 250 + static_cast<int>(rng.below(251)), w = 250 + static_cast<int>(rng.below(251));
      auto rgb = ddl::resize_image(small.rgb.data(), small.height, small.width, 3,
                                   {0, 0, static_cast<float>(small.height), static_cast<float>(small.width)}, h, w);
      for (auto& v : rgb) v = static_cast<std::uint8_t>(std::clamp(int(v) + int(rng.below(41)) - 20, 0, 255));
      const auto jpeg = ddl::encode_jpeg(rgb.data(), h, w, 90);
      const auto dir = std::filesystem::path(argv[2]) / sample.class_names[label];
      std::filesystem::create_directories(dir);
      char name[32];
      std::snprintf(name, sizeof name, "%05zu.jpg", written[label]++);
      std::ofstream(dir / name, std::ios::binary)
          .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
      bytes += jpeg.size();
    }
    std::size_t total = 0;
    for (auto n : written) total += n;
    std::printf("wrote %zu JPEG files (250-500 pixels a side, quality 90), %.1f MB, to %s\n", total, bytes / 1e6,
                argv[2]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_jpeg_folders: %s\n", e.what());
    return 2;
  }
}
