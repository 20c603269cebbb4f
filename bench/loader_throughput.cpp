// Images per second the BatchLoader delivers on its own (no training): the loader must stay ahead of the
// training step, with which it shares the cores.
//   loader_throughput DATASET.h5 [--image-size S] [--random-resized-crop] [--random-flip] [--threads N]
//                     [--batch B] [--images N]
// One pass over the first N images (all by default) in the sampler's order, augmented as the flags say,
// decoded on N threads where the dataset is encoded; the last line ends in "<rate> images/s". Without
// flags, a pixel dataset is timed four ways: plain and flip+crop, from the file and from memory.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/data/batch_loader.hpp"
#include "core/data/sampler.hpp"
#include "core/error.hpp"

namespace {

double time_pass(ddl::BatchLoader& loader, std::vector<std::size_t> indices, bool augment, std::size_t& images) {
  loader.start(std::move(indices), augment, 1, 0);
  const auto t0 = std::chrono::steady_clock::now();
  images = 0;
  while (const ddl::Batch* b = loader.next()) images += b->size();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void four_ways(const char* path, std::size_t batch, ddl::Context& ctx) {
  for (bool in_memory : {false, true})
    for (bool augment : {false, true}) {
      ddl::Preprocessing prep;
      prep.random_flip = augment;
      prep.random_crop_padding = augment ? 4 : 0;
      ddl::BatchLoader loader(path, prep, batch, ctx);
      const auto indices = ddl::training_indices(loader.dataset().size(), 1, 0, 0, 1, batch);
      if (in_memory) loader.keep_in_memory(indices);
      std::size_t images = 0;
      const double s = time_pass(loader, indices, augment, images);
      std::printf("loader %s, %s: %zu images in %.3f s, %.0f images/s\n", augment ? "flip+crop" : "plain    ",
                  in_memory ? "images in memory " : "images from HDF5", images, s, images / s);
    }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: loader_throughput DATASET.h5 [--image-size S] [--random-resized-crop] "
                 "[--random-flip] [--threads N] [--batch B] [--images N]\n");
    return 2;
  }
  try {
    ddl::Context ctx;
    ddl::Preprocessing prep;
    std::size_t batch = 64, limit = 0;
    bool flags = false;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      const auto value = [&] {
        if (i + 1 >= argc) throw ddl::InputError(a + " needs a value");
        return std::stoul(argv[++i]);
      };
      flags = flags || a.rfind("--", 0) == 0;
      if (a == "--image-size")
        prep.out_height = prep.out_width = static_cast<int>(value());
      else if (a == "--random-resized-crop")
        prep.random_resized_crop = true;
      else if (a == "--random-flip")
        prep.random_flip = true;
      else if (a == "--threads")
        prep.decode_threads = static_cast<int>(value());
      else if (a == "--batch")
        batch = value();
      else if (a == "--images")
        limit = value();
      else if (!flags)
        batch = std::stoul(a);  // the old form: DATASET.h5 BATCH
      else
        throw ddl::InputError("unknown option " + a);
    }
    if (!flags) {
      four_ways(argv[1], batch, ctx);
      return 0;
    }
    prep.normalize_mean_std = true;
    prep.mean = ddl::kImageNetMean;
    prep.stddev = ddl::kImageNetStd;
    ddl::BatchLoader loader(argv[1], prep, batch, ctx);
    auto indices = ddl::training_indices(loader.dataset().size(), 1, 0, 0, 1, batch);
    if (limit > 0 && limit < indices.size()) indices.resize(limit);
    std::size_t images = 0;
    const bool augment = prep.random_resized_crop || prep.random_flip;
    const double s = time_pass(loader, indices, augment, images);
    std::printf("loader, %d decoding threads, %s%sto %dx%d: %zu images in %.3f s, %.1f images/s\n", prep.decode_threads,
                prep.random_resized_crop ? "random-resized-crop " : "centre crop ", prep.random_flip ? "+ flip " : "",
                prep.out_height, prep.out_width, images, s, images / s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loader_throughput: %s\n", e.what());
    return 2;
  }
}
