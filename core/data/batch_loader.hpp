// Reads batches of images from an ImageDataset on a background thread, ahead of the training step, and
// turns them into the network's input: float NCHW, scaled to [0, 1] or normalised by per-channel mean
// and standard deviation, optionally augmented (random horizontal flip, random crop from a zero-padded
// image, or torchvision's random-resized-crop). Images are resampled (bilinear) when the network wants
// another size than the stored one. Augmentation draws from (seed, epoch, batch), so batches do not depend
// on thread timing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/context.hpp"
#include "core/data/image_cache.hpp"
#include "core/data/image_dataset.hpp"
#include "core/data/image_resize.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace ddl {

struct Preprocessing {
  bool normalize_mean_std = false;  // false: pixel / 255
  std::vector<float> mean, stddev;  // per channel, in pixel/255 units; used with normalize_mean_std
  bool random_flip = false;
  int random_crop_padding = 0;  // 0: no crop
  bool random_resized_crop = false;
  int out_height = 0, out_width = 0;  // 0: the stored size (an encoded dataset needs them given)
  // Encoded datasets (JPEG files, image_dataset.hpp): the threads that decode a batch (the loader's own among
  // them), the evaluation's centre crop as a fraction of the shorter side (torchvision's resize to
  // size / 0.875, then the centre), and what a corrupt image does: skip it (another image of its batch takes
  // its place, counted) or end the run naming it.
  int decode_threads = 1;
  std::vector<int> loader_cpus = {};  // the decoding threads' CPUs (the loader's own thread too); empty: any
  float val_crop_fraction = 0.875f;
  bool skip_corrupt = false;
  // The batch's element type: bf16 where the model's first layer takes it (no conversion in the step).
  dnnl::memory::data_type type = dnnl::memory::data_type::f32;
};

// Lerat et al.'s (2022, and torchvision's) ImageNet statistics, in pixel/255 units: --normalize imagenet.
inline const std::vector<float> kImageNetMean{0.485f, 0.456f, 0.406f}, kImageNetStd{0.229f, 0.224f, 0.225f};

// One image (h x w x c, uint8) as the network's input without augmentation, as the loader prepares
// validation batches: `box` of it (the whole image when empty) resampled to prep's output size where they
// differ, then scaled or normalised. out: c x out_height x out_width floats.
void prepare_image(const std::uint8_t* hwc, int h, int w, int c, const Preprocessing& prep, float* out,
                   CropBox box = {});

struct Batch {
  Tensor images;  // [n, C, H, W] plain, in Preprocessing::type
  std::vector<std::int32_t> labels;
  std::size_t size() const { return labels.size(); }
};

class BatchLoader {
 public:
  // Opens its own reader of `path` (readers are not shared between threads).
  BatchLoader(const std::string& path, const Preprocessing& prep, std::size_t batch_size, Context& ctx,
              std::size_t prefetch = 3);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Sizes, labels and class names: fixed at open, so safe to read while the producer reads pixels.
  const ImageDataset& dataset() const { return reader_; }

  // Begins a pass over `indices` in order (the last batch may be smaller). augment applies the random
  // transforms (training); epoch and seed select their draws. first_batch: the indices begin at this
  // batch of the epoch (a resumed epoch), whose draws they get.
  void start(std::vector<std::size_t> indices, bool augment, std::uint64_t seed, std::uint64_t epoch,
             std::size_t first_batch = 0);
  // The next batch, valid until the next call; nullptr at the end of the pass. Rethrows a read error.
  const Batch* next();
  // Reads these images now and serves them from memory from here on (other indices still from the file).
  // Stops a pass under way: call start() again. Returns the cache, to size it or to give to another loader.
  std::shared_ptr<const ImageCache> keep_in_memory(std::span<const std::size_t> indices);
  // Serves the images that `cache` holds (read by a loader of the same dataset) from memory. Stops a pass.
  void keep_in_memory(std::shared_ptr<const ImageCache> cache);
  // Seconds next() waited for a batch, and corrupt images skipped, since the last call. Between passes.
  double take_wait_seconds();
  std::size_t take_skipped();

 private:
  void produce();
  void stop();
  void fill(Batch& batch, std::span<const std::size_t> indices, std::uint64_t batch_index);
  // An encoded dataset's batch: bytes read here, each image's box and flip drawn here in order, then decoded
  // (only the box's region, jpeg_region.hpp), resampled and normalised on decode_threads threads.
  void fill_encoded(Batch& batch, std::span<const std::size_t> indices, std::uint64_t batch_index);
  // One image's box for evaluation, or for training without a random-resized-crop: the centre crop.
  CropBox centre_box(int h, int w) const;
  void settle_corrupt(Batch& batch, std::span<const std::size_t> indices, const std::vector<std::string>& failures,
                      std::size_t image_bytes);
  // One image with this batch's random flip, crop or resized crop (augment_), as pixel * scale + shift.
  void augment_one(const std::uint8_t* image, const std::vector<float>& scale, const std::vector<float>& shift,
                   Rng& rng, float* out);
  int out_height() const { return prep_.out_height > 0 ? prep_.out_height : reader_.height(); }
  int out_width() const { return prep_.out_width > 0 ? prep_.out_width : reader_.width(); }

  ImageDataset reader_;  // read() on the producer thread, or by keep_in_memory while none runs
  Preprocessing prep_;
  std::size_t batch_size_;
  Context& ctx_;
  std::vector<Batch> slots_;
  std::shared_ptr<const ImageCache> cache_;
  std::vector<std::uint8_t> pixels_;        // a batch read from the file
  std::vector<const std::uint8_t*> images_;  // a batch's images, in the cache or in pixels_
  std::vector<std::uint8_t> shifted_;        // one image flipped or moved by a random crop
  std::vector<float> image_floats_;          // one image before its conversion to bf16
  std::vector<std::vector<std::uint8_t>> encoded_;  // a batch's JPEG files
  double waited_ = 0;                               // in next(), the consumer's
  std::size_t skipped_ = 0;                         // corrupt images, the producer's (read between passes)

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::size_t> indices_;
  std::size_t first_batch_ = 0;
  bool augment_ = false;
  std::uint64_t seed_ = 0, epoch_ = 0;
  std::size_t total_batches_ = 0, produced_ = 0, consumed_ = 0, released_ = 0;
  bool holding_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace ddl
