// Images per second the BatchLoader delivers on its own (no training), with and without augmentation,
// reading the file or the images kept in memory (--cache-images):
// the loader must stay far ahead of the training step, since on a small machine it shares the cores.
//   loader_throughput DATASET.h5 [batch=64]
#include <chrono>
#include <cstdio>
#include <string>

#include "core/data/batch_loader.hpp"
#include "core/data/sampler.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: loader_throughput DATASET.h5 [batch]\n");
    return 2;
  }
  const std::size_t batch = argc > 2 ? std::stoul(argv[2]) : 64;
  ddl::Context ctx;
  for (bool in_memory : {false, true}) {
    for (bool augment : {false, true}) {
      ddl::Preprocessing prep;
      prep.random_flip = augment;
      prep.random_crop_padding = augment ? 4 : 0;
      ddl::BatchLoader loader(argv[1], prep, batch, ctx);
      const auto n = loader.dataset().size();
      const auto indices = ddl::training_indices(n, 1, 0, 0, 1, batch);
      if (in_memory) loader.keep_in_memory(indices);
      loader.start(indices, augment, 1, 0);
      const auto t0 = std::chrono::steady_clock::now();
      std::size_t images = 0;
      while (const ddl::Batch* b = loader.next()) images += b->size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("loader %s, %s: %zu images in %.3f s, %.0f images/s\n", augment ? "flip+crop" : "plain    ",
                  in_memory ? "images in memory " : "images from HDF5", images, s, images / s);
    }
  }
  return 0;
}
