#include "core/data/batch_loader.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "core/bf16.hpp"
#include "core/data/image_resize.hpp"
#include "core/data/jpeg_region.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/thread_affinity.hpp"
#include "core/vector_clones.hpp"

namespace ddl {

BatchLoader::BatchLoader(const std::string& path, const Preprocessing& prep, std::size_t batch_size, Context& ctx,
                         std::size_t prefetch)
    : reader_(path), prep_(prep), batch_size_(batch_size), ctx_(ctx), slots_(prefetch + 1) {
  if (batch_size == 0) throw InputError("batch size must be positive");
  const auto channels = static_cast<std::size_t>(reader_.channels());
  if (prep_.normalize_mean_std && (prep_.mean.size() != channels || prep_.stddev.size() != channels))
    throw InputError(path + ": mean/std normalisation needs " + std::to_string(channels) + " values each");
  for (float s : prep_.stddev)
    if (!(s > 0)) throw InputError("normalisation standard deviations must be positive");
  if (prep_.random_crop_padding < 0) throw InputError("random crop padding must be non-negative");
  if (prep_.out_height < 0 || prep_.out_width < 0) throw InputError("image output size must be positive");
  if (reader_.encoded()) {
    if (prep_.out_height == 0 || prep_.out_width == 0) throw Error(path + ": an encoded dataset needs an output size");
    if (prep_.random_crop_padding > 0)
      throw InputError(path +
                       ": holds JPEG files of any size; augment them with --random-resized-crop, not "
                       "--random-crop-padding (a pixel dataset's)");
    if (prep_.decode_threads < 1) throw InputError("the loader needs at least one decoding thread");
    if (!(prep_.val_crop_fraction > 0 && prep_.val_crop_fraction <= 1))
      throw InputError("the evaluation's crop fraction must be in (0, 1]");
  }
}

BatchLoader::~BatchLoader() { stop(); }

void BatchLoader::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void BatchLoader::start(std::vector<std::size_t> indices, bool augment, std::uint64_t seed, std::uint64_t epoch,
                        std::size_t first_batch) {
  stop();
  for (auto i : indices)
    if (i >= reader_.size()) throw Error("BatchLoader: index " + std::to_string(i) + " out of range");
  indices_ = std::move(indices);
  augment_ = augment;
  seed_ = seed;
  epoch_ = epoch;
  first_batch_ = first_batch;
  total_batches_ = (indices_.size() + batch_size_ - 1) / batch_size_;
  produced_ = consumed_ = released_ = 0;
  holding_ = stopping_ = false;
  error_ = nullptr;
  worker_ = std::thread([this] { produce(); });
}

const Batch* BatchLoader::next() {
  std::unique_lock lock(mutex_);
  if (holding_) {
    ++released_;
    holding_ = false;
    cv_.notify_all();
  }
  const auto began = std::chrono::steady_clock::now();
  cv_.wait(lock, [&] { return produced_ > consumed_ || error_ || produced_ == total_batches_; });
  waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (produced_ > consumed_) {
    holding_ = true;
    return &slots_[consumed_++ % slots_.size()];
  }
  if (error_) std::rethrow_exception(error_);
  return nullptr;
}

double BatchLoader::take_wait_seconds() {
  std::lock_guard lock(mutex_);
  return std::exchange(waited_, 0.0);
}

std::size_t BatchLoader::take_skipped() {
  std::lock_guard lock(mutex_);
  return std::exchange(skipped_, std::size_t{0});
}

std::shared_ptr<const ImageCache> BatchLoader::keep_in_memory(std::span<const std::size_t> indices) {
  if (reader_.encoded()) throw Error("BatchLoader::keep_in_memory: an encoded dataset is read from its file");
  stop();
  cache_.reset();  // before the new one is read: not both in memory
  cache_ = std::make_shared<const ImageCache>(reader_, indices);
  return cache_;
}

void BatchLoader::keep_in_memory(std::shared_ptr<const ImageCache> cache) {
  stop();
  cache_ = std::move(cache);
}

void BatchLoader::produce() {
  h5::silence_errors_on_this_thread();
  pin_this_thread(prep_.loader_cpus);
  try {
    for (std::size_t b = 0; b < total_batches_; ++b) {
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || b - released_ < slots_.size(); });
        if (stopping_) return;
      }
      const std::size_t begin = b * batch_size_, end = std::min(indices_.size(), begin + batch_size_);
      fill(slots_[b % slots_.size()], std::span(indices_).subspan(begin, end - begin), first_batch_ + b);
      {
        std::lock_guard lock(mutex_);
        produced_ = b + 1;
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard lock(mutex_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

namespace {

// out = (pixel / 255 - mean) / std  ==  pixel * scale + shift, per channel.
struct ChannelAffine {
  std::vector<float> scale, shift;
};

ChannelAffine channel_affine(const Preprocessing& prep, int channels) {
  ChannelAffine a{std::vector<float>(channels, 1.0f / 255.0f), std::vector<float>(channels, 0.0f)};
  if (prep.normalize_mean_std)
    for (int k = 0; k < channels; ++k) {
      a.scale[k] = 1.0f / (255.0f * prep.stddev[k]);
      a.shift[k] = -prep.mean[k] / prep.stddev[k];
    }
  return a;
}

// Interleaved pixels (plane of them, c channels each) to c planes of pixel * scale[k] + shift[k]. In two
// passes, both of which vectorise: the channels apart as bytes, then each plane to floats.
DDL_VECTOR_CLONES void planes_from_pixels(const std::uint8_t* hwc, std::size_t plane, int c, const float* scale,
                                          const float* shift, float* out) {
  constexpr std::size_t kRun = 1024;  // pixels a pass: the bytes stay in the L1 cache
  std::uint8_t bytes[4 * kRun];
  if (c > 4) {
    for (std::size_t p = 0; p < plane; ++p)
      for (int k = 0; k < c; ++k) out[k * plane + p] = hwc[p * c + k] * scale[k] + shift[k];
    return;
  }
  for (std::size_t begin = 0; begin < plane; begin += kRun) {
    const std::size_t n = std::min(kRun, plane - begin);
    const std::uint8_t* in = hwc + begin * c;
    if (c == 3)
      for (std::size_t p = 0; p < n; ++p) {
        bytes[p] = in[3 * p];
        bytes[kRun + p] = in[3 * p + 1];
        bytes[2 * kRun + p] = in[3 * p + 2];
      }
    else
      for (std::size_t p = 0; p < n; ++p)
        for (int k = 0; k < c; ++k) bytes[k * kRun + p] = in[p * c + k];
    for (int k = 0; k < c; ++k) {
      const float sk = scale[k], tk = shift[k];
      float* o = out + k * plane + begin;
      const std::uint8_t* b = bytes + k * kRun;
      for (std::size_t p = 0; p < n; ++p) o[p] = b[p] * sk + tk;
    }
  }
}

// Rounded to nearest even, as oneDNN converts (the step's input is then what converting f32 images gave).
DDL_VECTOR_CLONES void bf16_from_floats(const float* in, std::size_t n, std::uint16_t* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

// `box` of an h x w image resampled to c planes of oh x ow, mirrored left to right with `flip`, each value
// pixel * scale[k] + shift[k].
void resampled_planes(const std::uint8_t* hwc, int h, int w, int c, const CropBox& box, int oh, int ow, bool flip,
                      const float* scale, const float* shift, float* out) {
  const std::size_t plane = static_cast<std::size_t>(oh) * ow;
  resample(hwc, h, w, c, box, oh, ow, [&](int y, int x, int k, float v) {
    out[k * plane + static_cast<std::size_t>(y) * ow + (flip ? ow - 1 - x : x)] = v * scale[k] + shift[k];
  });
}

// prepare_image with the per-channel factors worked out once for a whole batch.
void prepare_one(const std::uint8_t* hwc, int h, int w, int c, const Preprocessing& prep, const ChannelAffine& a,
                 float* out, CropBox box) {
  const int oh = prep.out_height > 0 ? prep.out_height : h, ow = prep.out_width > 0 ? prep.out_width : w;
  const std::size_t plane = static_cast<std::size_t>(oh) * ow;
  if (box.height <= 0) box = CropBox{0, 0, static_cast<float>(h), static_cast<float>(w)};
  if (oh != h || ow != w || box.height != h || box.width != w)
    return resampled_planes(hwc, h, w, c, box, oh, ow, false, a.scale.data(), a.shift.data(), out);
  planes_from_pixels(hwc, plane, c, a.scale.data(), a.shift.data(), out);
}

}  // namespace

void prepare_image(const std::uint8_t* hwc, int h, int w, int c, const Preprocessing& prep, float* out, CropBox box) {
  prepare_one(hwc, h, w, c, prep, channel_affine(prep, c), out, box);
}

void BatchLoader::fill(Batch& batch, std::span<const std::size_t> indices, std::uint64_t batch_index) {
  if (reader_.encoded()) return fill_encoded(batch, indices, batch_index);
  const int h = reader_.height(), w = reader_.width(), c = reader_.channels();
  const int oh = out_height(), ow = out_width();
  const std::size_t n = indices.size(), plane = static_cast<std::size_t>(oh) * ow, floats = c * plane;
  const dnnl::memory::desc md = plain_desc({static_cast<dnnl::memory::dim>(n), c, oh, ow}, prep_.type);
  if (batch.images.empty() || batch.images.desc() != md) batch.images = Tensor(md, ctx_.engine());
  images_.resize(n);
  std::size_t held = 0;
  for (std::size_t i = 0; i < n && cache_; ++i) held += (images_[i] = cache_->find(indices[i])) != nullptr;
  if (held < n) {
    pixels_.resize(n * reader_.image_bytes());
    reader_.read(indices, pixels_);
    for (std::size_t i = 0; i < n; ++i) images_[i] = pixels_.data() + i * reader_.image_bytes();
  }
  batch.labels.resize(n);
  for (std::size_t i = 0; i < n; ++i) batch.labels[i] = reader_.labels()[indices[i]];

  // Each image is prepared in f32: into the batch, or for a bf16 batch into one image's floats first.
  const bool bf16 = prep_.type == dt::bf16;
  if (bf16) image_floats_.resize(floats);
  auto* bf16_images = static_cast<std::uint16_t*>(batch.images.memory().get_data_handle());
  const ChannelAffine affine = channel_affine(prep_, c);
  Rng rng = Rng::derived(seed_, 0xa09 + epoch_, batch_index);
  for (std::size_t i = 0; i < n; ++i) {
    float* out = bf16 ? image_floats_.data() : batch.images.data() + i * floats;
    if (augment_)
      augment_one(images_[i], affine.scale, affine.shift, rng, out);
    else
      prepare_one(images_[i], h, w, c, prep_, affine, out, {});
    if (bf16) bf16_from_floats(out, floats, bf16_images + i * floats);
  }
}

void BatchLoader::augment_one(const std::uint8_t* img, const std::vector<float>& scale,
                              const std::vector<float>& shift, Rng& rng, float* out) {
  const int h = reader_.height(), w = reader_.width(), c = reader_.channels();
  const int oh = out_height(), ow = out_width();
  const std::size_t plane = static_cast<std::size_t>(oh) * ow;
  const bool resample_box = prep_.random_resized_crop || oh != h || ow != w;
  const int pad = resample_box ? 0 : prep_.random_crop_padding;
  const bool flip = prep_.random_flip && rng.uniform() < 0.5f;
  if (resample_box) {
    const CropBox box = prep_.random_resized_crop ? random_resized_crop(h, w, rng)
                                                  : CropBox{0, 0, static_cast<float>(h), static_cast<float>(w)};
    return resampled_planes(img, h, w, c, box, oh, ow, flip, scale.data(), shift.data(), out);
  }
  // Crop offset in [-pad, pad]: output (y, x) reads input (y + dy, x + dx); outside reads a zero pixel.
  const int dy = pad ? static_cast<int>(rng.below(2 * pad + 1)) - pad : 0;
  const int dx = pad ? static_cast<int>(rng.below(2 * pad + 1)) - pad : 0;
  if (!flip && dy == 0 && dx == 0) return planes_from_pixels(img, plane, c, scale.data(), shift.data(), out);
  shifted_.assign(reader_.image_bytes(), 0);
  // Output x reads input x + dx, or w - 1 - x + dx flipped: inside the image for x in [x0, x1).
  // A shift by the whole width or more leaves it empty, and the image zero.
  const int x0 = flip ? std::max(0, dx) : std::max(0, -dx), x1 = flip ? std::min(w, w + dx) : std::min(w, w - dx);
  const std::size_t row = static_cast<std::size_t>(w) * c;
  for (int y = std::max(0, -dy); y < std::min(h, h - dy) && x0 < x1; ++y) {
    const std::uint8_t* in = img + static_cast<std::size_t>(y + dy) * row;
    std::uint8_t* out_row = shifted_.data() + static_cast<std::size_t>(y) * row;
    if (!flip) {
      std::copy_n(in + static_cast<std::size_t>(x0 + dx) * c, static_cast<std::size_t>(x1 - x0) * c, out_row + x0 * c);
      continue;
    }
    for (int x = x0; x < x1; ++x)
      std::copy_n(in + static_cast<std::size_t>(w - 1 - x + dx) * c, c, out_row + static_cast<std::size_t>(x) * c);
  }
  planes_from_pixels(shifted_.data(), plane, c, scale.data(), shift.data(), out);
}

CropBox BatchLoader::centre_box(int h, int w) const {
  const int oh = out_height(), ow = out_width();
  // The shorter side resized to out / fraction: the output's pixels are `step` image pixels each.
  const float step =
      static_cast<float>(std::min(h, w)) * prep_.val_crop_fraction / static_cast<float>(std::min(oh, ow));
  const float bh = std::min(static_cast<float>(h), step * oh), bw = std::min(static_cast<float>(w), step * ow);
  return {(h - bh) / 2, (w - bw) / 2, bh, bw};
}

void BatchLoader::fill_encoded(Batch& batch, std::span<const std::size_t> indices, std::uint64_t batch_index) {
  const int c = 3, oh = out_height(), ow = out_width();
  const std::size_t n = indices.size(), plane = static_cast<std::size_t>(oh) * ow, floats = c * plane;
  const dnnl::memory::desc md = plain_desc({static_cast<dnnl::memory::dim>(n), c, oh, ow}, prep_.type);
  if (batch.images.empty() || batch.images.desc() != md) batch.images = Tensor(md, ctx_.engine());
  batch.labels.resize(n);
  reader_.read_encoded(indices, encoded_);
  std::vector<CropBox> boxes(n);
  std::vector<char> flips(n, 0);
  Rng rng = Rng::derived(seed_, 0xa09 + epoch_, batch_index);
  for (std::size_t i = 0; i < n; ++i) {
    batch.labels[i] = reader_.labels()[indices[i]];
    const int h = reader_.image_height(indices[i]), w = reader_.image_width(indices[i]);
    boxes[i] = augment_ && prep_.random_resized_crop ? random_resized_crop(h, w, rng) : centre_box(h, w);
    flips[i] = augment_ && prep_.random_flip && rng.uniform() < 0.5f;
  }
  const ChannelAffine a = channel_affine(prep_, c);
  const bool bf16 = prep_.type == dt::bf16;
  auto* bf16_images = static_cast<std::uint16_t*>(batch.images.memory().get_data_handle());
  std::vector<std::string> failures(n);
  std::exception_ptr error;  // other than a corrupt image (memory), from any thread: rethrown after the join
  std::mutex error_mutex;
  const auto decode = [&](std::size_t first, std::size_t step) {
    if (first > 0) pin_this_thread(prep_.loader_cpus);
    std::vector<float> image(bf16 ? floats : 0);
    for (std::size_t i = first; i < n; i += step) {
      float* out = bf16 ? image.data() : batch.images.data() + i * floats;
      try {
        const JpegSize expected{reader_.image_height(indices[i]), reader_.image_width(indices[i])};
        const std::string name = reader_.file_of(indices[i]) + ": image " + std::to_string(indices[i]);
        const JpegRegion r = decode_jpeg_region(encoded_[i], boxes[i], oh, ow, name, &expected);
        resampled_planes(r.pixels.rgb.data(), r.pixels.height, r.pixels.width, c, r.box, oh, ow, flips[i] != 0,
                         a.scale.data(), a.shift.data(), out);
      } catch (const InputError& e) {
        failures[i] = e.what();
        continue;
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        return;
      }
      if (bf16) bf16_from_floats(out, floats, bf16_images + i * floats);
    }
  };
  {
    const auto step = static_cast<std::size_t>(std::max(1, prep_.decode_threads));
    std::vector<std::jthread> helpers;
    for (std::size_t t = 1; t < std::min(step, n); ++t) helpers.emplace_back(decode, t, step);
    decode(0, step);
  }
  if (error) std::rethrow_exception(error);
  settle_corrupt(batch, indices, failures, floats * (bf16 ? 2 : 4));
}

// A corrupt image is named (its file and index) and ends the pass, or, skipped, is replaced by the first
// good image of its batch (pixels and label), and counted.
void BatchLoader::settle_corrupt(Batch& batch, std::span<const std::size_t> indices,
                                 const std::vector<std::string>& failures, std::size_t image_bytes) {
  const auto bad = [&](std::size_t i) { return !failures[i].empty(); };
  const std::size_t n = indices.size();
  std::size_t good = 0;
  while (good < n && bad(good)) ++good;
  for (std::size_t i = 0; i < n; ++i) {
    if (!bad(i)) continue;
    if (!prep_.skip_corrupt || good == n)
      throw InputError(failures[i] + (prep_.skip_corrupt ? " (a whole batch of them)" : ""));
    auto* images = static_cast<std::uint8_t*>(batch.images.memory().get_data_handle());
    std::memcpy(images + i * image_bytes, images + good * image_bytes, image_bytes);
    batch.labels[i] = batch.labels[good];
    std::lock_guard lock(mutex_);
    ++skipped_;
  }
}

}  // namespace ddl
