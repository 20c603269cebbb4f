// The sampler's sharding and the batch loader's conversion, normalisation and augmentation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/bf16.hpp"
#include "core/data/batch_loader.hpp"
#include "core/data/dataset_writer.hpp"
#include "core/data/sampler.hpp"
#include "core/error.hpp"
#include "tests/data/fixtures.hpp"

namespace ddl {
namespace {

using test::pattern;
using test::TempDir;

TEST(Sampler, ReplicasSplitEachGlobalBatchWithoutOverlap) {
  const std::size_t n = 103, batch = 4;
  const int replicas = 3;
  const auto order = epoch_permutation(n, 9, 2);
  std::set<std::size_t> seen;
  for (int r = 0; r < replicas; ++r) {
    const auto mine = training_indices(n, 9, 2, r, replicas, batch);
    ASSERT_EQ(mine.size(), 8u * batch);  // 103 / 12 = 8 steps
    for (std::size_t s = 0; s < 8; ++s)
      for (std::size_t b = 0; b < batch; ++b) EXPECT_EQ(mine[s * batch + b], order[(s * replicas + r) * batch + b]);
    seen.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(seen.size(), 96u);
  EXPECT_NE(epoch_permutation(n, 9, 2), epoch_permutation(n, 9, 3));
  EXPECT_EQ(training_indices(n, 9, 2, 0, 1, 12), std::vector<std::size_t>(order.begin(), order.begin() + 96));
  EXPECT_THROW(training_indices(5, 1, 0, 0, 2, 4), InputError);
}

TEST(Sampler, EvaluationCoversEveryImageOnce) {
  std::vector<std::size_t> all;
  for (int r = 0; r < 4; ++r) {
    const auto part = evaluation_indices(10, r, 4);
    all.insert(all.end(), part.begin(), part.end());
  }
  std::vector<std::size_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { write_image_dataset(test::pattern_set(10, 3, 4, 2), path_, 2); }
  TempDir dir_;
  std::string path_ = dir_ / "l.h5";
  Context ctx_;
};

TEST_F(LoaderTest, ScalesToUnitRangeInNchwOrderWithAPartialLastBatch) {
  BatchLoader loader(path_, {}, 4, ctx_);
  loader.start({7, 1, 2, 9, 0, 5}, false, 1, 0);
  const Batch* b = loader.next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->images.dims(), (dims_t{4, 3, 3, 4}));
  EXPECT_EQ(b->labels, (std::vector<std::int32_t>{1, 1, 0, 1}));
  // NCHW: element (n=0, c=2, y=1, x=3) of image 7.
  EXPECT_FLOAT_EQ(b->images.data()[((0 * 3 + 2) * 3 + 1) * 4 + 3], pattern(7, 1, 3, 2) / 255.0f);
  b = loader.next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size(), 2u);
  EXPECT_FLOAT_EQ(b->images.data()[((1 * 3 + 0) * 3 + 2) * 4 + 0], pattern(5, 2, 0, 0) / 255.0f);
  EXPECT_EQ(loader.next(), nullptr);
}

TEST_F(LoaderTest, MeanStdNormalisation) {
  Preprocessing prep{.normalize_mean_std = true, .mean = {0.5f, 0.25f, 0.0f}, .stddev = {0.5f, 2.0f, 1.0f}};
  BatchLoader loader(path_, prep, 2, ctx_);
  loader.start({3}, false, 1, 0);
  const Batch* b = loader.next();
  ASSERT_NE(b, nullptr);
  EXPECT_NEAR(b->images.data()[(1 * 3 + 0) * 4 + 2], (pattern(3, 0, 2, 1) / 255.0f - 0.25f) / 2.0f, 1e-6);
}

TEST_F(LoaderTest, FlipAndCropAreSeededAndOnlyWhenAugmenting) {
  Preprocessing prep{.mean = {}, .stddev = {}, .random_flip = true, .random_crop_padding = 1};
  BatchLoader loader(path_, prep, 10, ctx_);
  std::vector<std::size_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  auto pass = [&](bool augment, std::uint64_t epoch) {
    loader.start(all, augment, 5, epoch);
    const Batch* b = loader.next();
    return std::vector<float>(b->images.data(), b->images.data() + b->images.elements());
  };
  const auto plain = pass(false, 0), a = pass(true, 0), again = pass(true, 0), other = pass(true, 1);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, plain);
  EXPECT_NE(a, other);
  // Every augmented image is its original, flipped or not, shifted by at most one pixel with zeros
  // coming in: look for a transform that reproduces each image exactly, all its channels.
  for (int i = 0; i < 10; ++i) {
    bool found = false;
    for (int flip = 0; flip < 2 && !found; ++flip)
      for (int dy = -1; dy <= 1 && !found; ++dy)
        for (int dx = -1; dx <= 1 && !found; ++dx) {
          bool match = true;
          for (int k = 0; k < 3 && match; ++k)
            for (int y = 0; y < 3 && match; ++y)
              for (int x = 0; x < 4 && match; ++x) {
                const int sy = y + dy, sx = (flip ? 3 - x : x) + dx;
                const float expect =
                    (sy < 0 || sy >= 3 || sx < 0 || sx >= 4) ? 0.0f : pattern(i, sy, sx, k) / 255.0f;
                match = std::abs(a[((i * 3 + k) * 3 + y) * 4 + x] - expect) < 1e-6f;
              }
          found = match;
        }
    EXPECT_TRUE(found) << "image " << i;
  }
}

// Stored 3x4, delivered 6x8: the pattern is linear in y and x, so bilinear resampling must reproduce it
// at every output pixel's centre (clamped to the image at the borders).
TEST_F(LoaderTest, ResamplesToTheRequestedSize) {
  BatchLoader loader(path_, {.out_height = 6, .out_width = 8}, 2, ctx_);
  loader.start({0}, false, 1, 0);
  const Batch* b = loader.next();
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->images.dims(), (dims_t{1, 3, 6, 8}));
  for (int y = 0; y < 6; ++y)
    for (int x = 0; x < 8; ++x) {
      const float sy = std::clamp((y + 0.5f) / 2 - 0.5f, 0.0f, 2.0f), sx = std::clamp((x + 0.5f) / 2 - 0.5f, 0.0f, 3.0f);
      EXPECT_NEAR(b->images.data()[2 * 48 + y * 8 + x], (pattern(0, 0, 0, 2) + sy + sx) / 255.0f, 1e-5) << y << "," << x;
    }
}

TEST_F(LoaderTest, RandomResizedCropIsSeededStaysInRangeAndOnlyWhenAugmenting) {
  Preprocessing prep{.random_resized_crop = true, .out_height = 6, .out_width = 8};
  BatchLoader loader(path_, prep, 10, ctx_);
  std::vector<std::size_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  auto pass = [&](bool augment, std::uint64_t epoch) {
    loader.start(all, augment, 5, epoch);
    const Batch* b = loader.next();
    EXPECT_EQ(b->images.dims(), (dims_t{10, 3, 6, 8}));
    return std::vector<float>(b->images.data(), b->images.data() + b->images.elements());
  };
  BatchLoader resize_only(path_, {.out_height = 6, .out_width = 8}, 10, ctx_);
  resize_only.start(all, true, 5, 0);
  const Batch* r = resize_only.next();
  const std::vector<float> resized(r->images.data(), r->images.data() + r->images.elements());
  const auto plain = pass(false, 0), a = pass(true, 0), again = pass(true, 0), other = pass(true, 1);
  EXPECT_EQ(plain, resized);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, plain);
  EXPECT_NE(a, other);
  // A crop only ever shows pixel values its image has (between its smallest and largest).
  for (int i = 0; i < 10; ++i) {
    const float lo = pattern(i, 0, 0, 0) / 255.0f, hi = pattern(i, 2, 3, 0) / 255.0f;
    if (hi < lo) continue;  // the pattern wrapped around 255 for this image
    for (int p = 0; p < 48; ++p) {
      EXPECT_GE(a[i * 144 + p], lo - 1e-6f);
      EXPECT_LE(a[i * 144 + p], hi + 1e-6f);
    }
  }
}

// Images kept in memory give the same batches as images read from the file, augmented or not, and outlive
// the file; the others still come from the file.
TEST_F(LoaderTest, ImagesKeptInMemoryGiveTheSameBatchesAndOutliveTheFile) {
  Preprocessing prep{.mean = {}, .stddev = {}, .random_flip = true, .random_crop_padding = 1};
  BatchLoader from_file(path_, prep, 3, ctx_), from_memory(path_, prep, 3, ctx_);
  const std::vector<std::size_t> kept{8, 0, 3, 9, 5, 3};
  const auto cache = from_memory.keep_in_memory(kept);
  EXPECT_EQ(cache->images(), 5u);  // 3 once
  EXPECT_EQ(cache->bytes(), 5u * 3 * 4 * 3);
  ASSERT_NE(cache->find(9), nullptr);
  EXPECT_EQ(cache->find(9)[(2 * 4 + 1) * 3 + 0], pattern(9, 2, 1, 0));
  EXPECT_EQ(cache->find(1), nullptr);
  EXPECT_EQ(cache->find(10), nullptr);
  auto batches = [](BatchLoader& loader, std::vector<std::size_t> indices, bool augment) {
    loader.start(std::move(indices), augment, 7, 2);
    std::vector<float> all;
    while (const Batch* b = loader.next()) all.insert(all.end(), b->images.data(), b->images.data() + b->images.elements());
    return all;
  };
  for (bool augment : {false, true}) {
    EXPECT_EQ(batches(from_memory, {5, 0, 9, 8, 3}, augment), batches(from_file, {5, 0, 9, 8, 3}, augment));
    EXPECT_EQ(batches(from_memory, {1, 9, 2}, augment), batches(from_file, {1, 9, 2}, augment));  // 1, 2 from the file
  }
  // Another loader of the same dataset serves the same images from that memory.
  BatchLoader sharing(path_, prep, 3, ctx_);
  sharing.keep_in_memory(cache);
  for (bool augment : {false, true})
    EXPECT_EQ(batches(sharing, {9, 3, 0, 8}, augment), batches(from_file, {9, 3, 0, 8}, augment));
  // Cut short: what memory holds is still served; an image that must come from the file is an error.
  std::filesystem::resize_file(dir_ / "l-00001-of-00002.h5", 100);
  std::filesystem::resize_file(dir_ / "l-00000-of-00002.h5", 100);
  EXPECT_EQ(batches(from_memory, {9, 8, 0}, false).size(), 3u * 3 * 3 * 4);
  EXPECT_THROW(batches(from_memory, {9, 1}, false), Error);
}

// A crop padding of the image's size or more: some images shift out of view entirely, and are zero.
TEST_F(LoaderTest, CropsThatShiftTheWholeImageAwayGiveZeros) {
  Preprocessing prep{.mean = {}, .stddev = {}, .random_flip = true, .random_crop_padding = 5};
  BatchLoader loader(path_, prep, 10, ctx_);
  std::vector<std::size_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  int empty = 0;
  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    loader.start(all, true, 5, epoch);
    const Batch* b = loader.next();
    ASSERT_NE(b, nullptr);
    for (int i = 0; i < 10; ++i)
      empty += std::all_of(b->images.data() + i * 36, b->images.data() + (i + 1) * 36, [](float v) { return v == 0; });
  }
  EXPECT_GT(empty, 0);
}

// A bf16 batch holds each f32 value rounded to nearest even, augmented or not.
TEST_F(LoaderTest, Bf16BatchesHoldTheRoundedFloats) {
  Preprocessing prep{.normalize_mean_std = true, .mean = {0.5f, 0.25f, 0.0f}, .stddev = {0.5f, 2.0f, 1.0f},
                     .random_flip = true, .random_crop_padding = 1};
  BatchLoader as_f32(path_, prep, 4, ctx_);
  prep.type = dt::bf16;
  BatchLoader as_bf16(path_, prep, 4, ctx_);
  for (bool augment : {false, true}) {
    as_f32.start({4, 9, 0, 7, 2}, augment, 3, 1);
    as_bf16.start({4, 9, 0, 7, 2}, augment, 3, 1);
    while (const Batch* f = as_f32.next()) {
      const Batch* b = as_bf16.next();
      ASSERT_NE(b, nullptr);
      ASSERT_EQ(b->images.desc(), plain_desc(f->images.dims(), dt::bf16));
      EXPECT_EQ(b->labels, f->labels);
      const auto* h = static_cast<const std::uint16_t*>(b->images.memory().get_data_handle());
      for (std::size_t k = 0; k < f->images.elements(); ++k) ASSERT_EQ(h[k], to_bf16(f->images.data()[k])) << k;
    }
    EXPECT_EQ(as_bf16.next(), nullptr);
  }
}

TEST_F(LoaderTest, ReadErrorsReachTheConsumer) {
  BatchLoader loader(path_, {}, 2, ctx_);
  EXPECT_THROW(loader.start({0, 10}, false, 1, 0), Error);
  // A shard truncated after opening: the background read fails and next() rethrows it.
  std::filesystem::resize_file(dir_ / "l-00001-of-00002.h5", 100);
  loader.start({9, 8}, false, 1, 0);
  EXPECT_THROW(while (loader.next()){}, Error);
}

}  // namespace
}  // namespace ddl
