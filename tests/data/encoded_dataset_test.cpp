// Encoded datasets (ddl_data import --store encoded): the importer keeps every JPEG's bytes, re-encodes
// PNGs and images over --max-side, splits and shards as the pixel importer does, and leaves nothing behind
// when a file is corrupt; the reader refuses damaged files at open; the loader's batches are the pixel
// store's where no crop applies, its random-resized-crop boxes are torchvision's, and corrupt images are
// named or skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <random>

#include "core/data/batch_loader.hpp"
#include "core/data/dataset_writer.hpp"
#include "core/data/encoded_import.hpp"
#include "core/data/encoded_writer.hpp"
#include "core/data/image_dataset.hpp"
#include "core/data/image_decode.hpp"
#include "core/data/jpeg_encode.hpp"
#include "core/data/jpeg_region.hpp"
#include "core/error.hpp"
#include "tests/data/fixtures.hpp"

namespace ddl {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::vector<std::uint8_t> smooth(int h, int w, int seed) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        rgb[(static_cast<std::size_t>(y) * w + x) * 3 + c] =
            static_cast<std::uint8_t>(128 + 90 * std::sin((x + 3 * seed) / 9.0 + c) * std::cos((y + seed) / 7.0));
  return rgb;
}

std::vector<std::uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// <root>/<class>/<i>.jpg of the given sizes.
void write_jpegs(const std::string& dir, const std::vector<std::pair<int, int>>& sizes, int seed) {
  fs::create_directories(dir);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto [h, w] = sizes[i];
    write_bytes(dir + "/" + std::to_string(i) + ".jpg", encode_jpeg(smooth(h, w, seed + int(i)).data(), h, w, 90));
  }
}

EncodedImportResult import(const std::string& root, const std::string& out, int shards = 1, double val = 0,
                           int max_side = 0) {
  EncodedImportOptions o{out, out + ".val.h5", shards, val, 7, 2, 90, max_side};
  return import_encoded(list_image_folder(root), o, {});
}

TEST(EncodedImport, KeepsEveryJpegsBytesAndReencodesPngs) {
  TempDir dir;
  write_jpegs(dir / "in/cat", {{40, 60}, {33, 17}, {64, 64}}, 1);
  write_jpegs(dir / "in/dog", {{20, 90}}, 5);
  test::write_png(dir / "in/dog/z.png", 24, 30, 3);
  const auto r = import(dir / "in", dir / "e.h5", 2);
  EXPECT_EQ(r.train, 5u);
  EXPECT_EQ(r.reencoded, 1u);
  ASSERT_EQ(r.written.size(), 2u);
  ImageDataset ds(dir / "e.h5");
  ASSERT_TRUE(ds.encoded());
  ASSERT_EQ(ds.size(), 5u);
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"cat", "dog"}));
  std::map<std::vector<std::uint8_t>, std::string> originals;
  for (const auto& entry : fs::recursive_directory_iterator(dir / "in"))
    if (entry.path().extension() == ".jpg") originals[file_bytes(entry.path())] = entry.path().string();
  std::size_t kept = 0, pngs = 0;
  std::vector<std::uint8_t> bytes;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    ds.read_encoded(i, bytes);
    const JpegSize size = jpeg_size(bytes, "stored");
    EXPECT_EQ(size.height, ds.image_height(i));
    EXPECT_EQ(size.width, ds.image_width(i));
    if (originals.count(bytes)) {
      ++kept;
      EXPECT_EQ(ds.labels()[i], originals[bytes].find("/cat/") != std::string::npos ? 0 : 1);
      continue;
    }
    ++pngs;  // the PNG as JPEG at quality 90: its pixels within JPEG's loss
    EXPECT_EQ(ds.labels()[i], 1);
    const DecodedImage png = decode_image(dir / "in/dog/z.png"), jpeg = decode_jpeg_bytes(bytes, "stored");
    ASSERT_EQ(jpeg.height, 24);
    ASSERT_EQ(jpeg.width, 30);
    double diff = 0;
    for (std::size_t k = 0; k < png.rgb.size(); ++k) diff += std::abs(int(png.rgb[k]) - int(jpeg.rgb[k]));
    EXPECT_LT(diff / static_cast<double>(png.rgb.size()), 8.0);
  }
  EXPECT_EQ(kept, 4u);
  EXPECT_EQ(pngs, 1u);
  // The files hold little besides the images' bytes.
  std::uintmax_t files = 0;
  for (const auto& f : r.written) files += fs::file_size(f);
  EXPECT_LT(static_cast<double>(files), 1.05 * static_cast<double>(r.stored_bytes) + 2 * 16384);
}

TEST(EncodedImport, MaxSideReencodesOnlyLargerImages) {
  TempDir dir;
  write_jpegs(dir / "in/a", {{300, 200}, {80, 60}}, 2);
  const auto r = import(dir / "in", dir / "e.h5", 1, 0, 100);
  EXPECT_EQ(r.reencoded, 1u);
  ImageDataset ds(dir / "e.h5");
  std::vector<std::pair<int, int>> sizes;
  for (std::size_t i = 0; i < ds.size(); ++i) sizes.emplace_back(ds.image_height(i), ds.image_width(i));
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<std::pair<int, int>>{{80, 60}, {100, 67}}));
}

// The same seed orders, splits and shards the images as the pixel importer does: decoded, the stored files
// are the pixel dataset's images.
TEST(EncodedImport, SplitsAndShardsAsThePixelImporter) {
  TempDir dir;
  write_jpegs(dir / "in/a", std::vector<std::pair<int, int>>(7, {12, 10}), 3);
  write_jpegs(dir / "in/b", std::vector<std::pair<int, int>>(6, {12, 10}), 9);
  import(dir / "in", dir / "e.h5", 3, 0.3);
  auto [train, val] = shuffle_split(import_image_folder(dir / "in", 2), 0.3, 7);
  write_image_dataset(train, dir / "p.h5", 3);
  write_image_dataset(val, dir / "p.val.h5", 1);
  for (const auto& [encoded_path, pixel_path] :
       {std::pair{dir / "e.h5", dir / "p.h5"}, {dir / "e.h5.val.h5", dir / "p.val.h5"}}) {
    ImageDataset e(encoded_path), p(pixel_path);
    ASSERT_EQ(e.size(), p.size());
    EXPECT_EQ(e.files().size(), p.files().size());
    EXPECT_EQ(e.labels(), p.labels());
    std::vector<std::uint8_t> bytes, pixels(p.image_bytes());
    for (std::size_t i = 0; i < e.size(); ++i) {
      e.read_encoded(i, bytes);
      const std::size_t index[1] = {i};
      p.read(index, pixels);
      EXPECT_EQ(decode_jpeg_bytes(bytes, "stored").rgb, pixels) << i;
    }
  }
}

TEST(EncodedImport, ACorruptJpegIsNamedAndNothingIsLeftBehind) {
  TempDir dir;
  write_jpegs(dir / "in/a", {{30, 30}, {30, 30}}, 4);
  auto bytes = file_bytes(dir / "in/a/1.jpg");
  bytes.resize(bytes.size() - 40);
  write_bytes(dir / "in/a/1.jpg", bytes);
  try {
    import(dir / "in", dir / "e.h5", 1, 0.5);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("1.jpg: corrupt JPEG (the file ends early"), std::string::npos) << e.what();
  }
  for (const auto& entry : fs::directory_iterator(dir.path())) EXPECT_EQ(entry.path().filename(), "in");
  // An import killed mid-way leaves only its temporary file, which the next import replaces.
  write_bytes(dir / "e.h5.tmp", {1, 2, 3});
  write_bytes(dir / "in/a/1.jpg", encode_jpeg(smooth(30, 30, 1).data(), 30, 30, 90));
  import(dir / "in", dir / "e.h5", 1, 0.5);
  EXPECT_FALSE(fs::exists(dir / "e.h5.tmp"));
  EXPECT_EQ(ImageDataset(dir / "e.h5").size() + ImageDataset(dir / "e.h5.val.h5").size(), 2u);
}

// A batch's images read together: runs of neighbours in one read each, across shards, in any order asked.
TEST(EncodedDataset, ABatchReadsAsItsImagesOneByOne) {
  TempDir dir;
  write_jpegs(dir / "in/a", {{20, 20}, {20, 24}, {30, 10}, {12, 40}, {16, 16}, {25, 25}}, 8);
  import(dir / "in", dir / "e.h5", 2);
  ImageDataset ds(dir / "e.h5");
  const std::vector<std::size_t> indices = {4, 2, 3, 0, 1, 5, 2};
  std::vector<std::vector<std::uint8_t>> together;
  ds.read_encoded(indices, together);
  ASSERT_GE(together.size(), indices.size());
  std::vector<std::uint8_t> one;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    ds.read_encoded(indices[k], one);
    EXPECT_EQ(together[k], one) << k;
  }
}

// Offsets and sizes that a damaged file would make the reader trust are refused at open, each named.
TEST(EncodedDataset, DamagedOffsetsAndSizesAreRefusedAtOpen) {
  TempDir dir;
  write_jpegs(dir / "in/a", {{20, 20}, {20, 24}, {16, 30}}, 6);
  import(dir / "in", dir / "e.h5");
  const auto damaged = [&](const std::string& dataset, std::size_t at, std::int64_t value) {
    fs::copy_file(dir / "e.h5", dir / "d.h5", fs::copy_options::overwrite_existing);
    {
      h5::Handle f = h5::open_file_for_update(dir / "d.h5");
      if (dataset == "offsets") {
        const std::int64_t v[1] = {value};
        h5::write_slice<std::int64_t>(f, dataset, at, v);
      } else {
        h5::Handle sizes = h5::open_dataset(f, dataset, "d.h5");
        std::vector<std::int32_t> all = h5::read_dataset<std::int32_t>(f, dataset, "d.h5");
        all.at(at) = static_cast<std::int32_t>(value);
        h5::check(H5Dwrite(sizes.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()), "write", "d.h5");
      }
    }
    try {
      ImageDataset ds(dir / "d.h5");
      return std::string("no error");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(damaged("offsets", 3, 1 << 30).find("d.h5: the encoded images' offsets do not match"), std::string::npos);
  EXPECT_NE(damaged("offsets", 0, 5).find("d.h5: the encoded images' offsets do not match"), std::string::npos);
  EXPECT_NE(damaged("offsets", 1, 0).find("d.h5: image 0 has no bytes (corrupt offsets)"), std::string::npos);
  EXPECT_NE(damaged("sizes", 2, 0).find("d.h5: image 1 is 0x"), std::string::npos);
  EXPECT_NE(damaged("sizes", 5, 1 << 30).find("not an image size (corrupt file?)"), std::string::npos);
  // A size that lies is found when the image is decoded: the loader names it.
  EXPECT_EQ(damaged("sizes", 0, 21), "no error");
  Context ctx;
  Preprocessing prep{.out_height = 8, .out_width = 8};
  BatchLoader loader(dir / "d.h5", prep, 3, ctx);
  loader.start({0, 1, 2}, false, 1, 0);
  try {
    loader.next();
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("image 0: corrupt JPEG (its size is not the one the dataset records)"),
              std::string::npos)
        << e.what();
  }
}

class EncodedLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    write_jpegs(dir_ / "in/a", std::vector<std::pair<int, int>>(5, {16, 20}), 1);
    write_jpegs(dir_ / "in/b", std::vector<std::pair<int, int>>(4, {16, 20}), 2);
    import(dir_ / "in", dir_ / "e.h5");
    auto [train, none] = shuffle_split(import_image_folder(dir_ / "in", 1), 0, 7);
    write_image_dataset(train, dir_ / "p.h5", 1);
  }
  std::vector<float> batch(const std::string& path, Preprocessing prep, bool augment,
                           std::vector<std::int32_t>* labels = nullptr) {
    BatchLoader loader(path, prep, 9, ctx_);
    std::vector<std::size_t> all(9);
    std::iota(all.begin(), all.end(), 0);
    loader.start(all, augment, 3, 1);
    const Batch* b = loader.next();
    if (labels) *labels = b->labels;
    return {b->images.data(), b->images.data() + b->images.bytes() / sizeof(float)};
  }
  TempDir dir_;
  Context ctx_;
};

// Without a crop (the whole image, as a centre crop of fraction 1) and at the stored size, an encoded batch
// is the pixel store's, flips included.
TEST_F(EncodedLoader, ABatchIsThePixelStoresWhereNoCropApplies) {
  Preprocessing prep{.random_flip = true, .out_height = 16, .out_width = 20};
  prep.val_crop_fraction = 1.0f;
  std::vector<std::int32_t> encoded_labels, pixel_labels;
  const auto encoded = batch(dir_ / "e.h5", prep, true, &encoded_labels);
  const auto pixels = batch(dir_ / "p.h5", prep, true, &pixel_labels);
  EXPECT_EQ(encoded_labels, pixel_labels);
  ASSERT_EQ(encoded.size(), pixels.size());
  for (std::size_t i = 0; i < encoded.size(); ++i) ASSERT_NEAR(encoded[i], pixels[i], 1e-6f) << i;
}

// The draws are made in order before the decoding threads start: the batch is the same on any thread count.
TEST_F(EncodedLoader, RandomResizedCropsDoNotDependOnTheDecodingThreads) {
  Preprocessing prep{.random_flip = true, .random_resized_crop = true, .out_height = 8, .out_width = 8};
  const auto one = batch(dir_ / "e.h5", prep, true);
  prep.decode_threads = 3;
  EXPECT_EQ(batch(dir_ / "e.h5", prep, true), one);
  EXPECT_NE(batch(dir_ / "e.h5", prep, false), one);
}

TEST_F(EncodedLoader, ACorruptImageIsNamedOrSkipped) {
  // A dataset whose second image is a JPEG cut in half (what the importer refuses, written directly).
  std::vector<EncodedImage> images(3);
  for (int i = 0; i < 3; ++i) {
    images[i] = {encode_jpeg(smooth(16, 20, i).data(), 16, 20, 90), 16, 20, i % 2};
  }
  images[1].bytes.resize(images[1].bytes.size() / 2);
  {
    EncodedShardWriter writer(dir_ / "bad.h5", {0, 1, 0, 3}, {"a", "b"}, 4096);
    writer.append(images);
    writer.finish({0.5, 0.5, 0.5}, {0.2, 0.2, 0.2});
  }
  Preprocessing prep{.out_height = 16, .out_width = 20};
  BatchLoader refuse(dir_ / "bad.h5", prep, 3, ctx_);
  refuse.start({0, 1, 2}, false, 1, 0);
  try {
    refuse.next();
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.h5: image 1: corrupt JPEG"), std::string::npos) << e.what();
  }
  prep.skip_corrupt = true;
  BatchLoader skip(dir_ / "bad.h5", prep, 3, ctx_);
  skip.start({0, 1, 2}, false, 1, 0);
  const Batch* b = skip.next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->labels, (std::vector<std::int32_t>{0, 0, 0}));
  const std::size_t image = 3 * 16 * 20;
  EXPECT_TRUE(std::equal(b->images.data(), b->images.data() + image, b->images.data() + image));
  EXPECT_EQ(skip.take_skipped(), 1u);
  EXPECT_EQ(skip.take_skipped(), 0u);
}

// torchvision's RandomResizedCrop.get_params written out (area fraction uniform in [0.08, 1], log-aspect
// uniform in [log 3/4, log 4/3], ten tries, sides rounded), on another generator: ddl's boxes come from the
// same distribution (histograms of area fraction and aspect within sampling noise).
TEST(RandomResizedCrop, BoxesAreDrawnAsTorchvisionDrawsThem) {
  const int h = 375, w = 500, draws = 40000, bins = 10;
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<double> unit(0, 1);
  const auto reference = [&]() -> std::pair<double, double> {
    for (int t = 0; t < 10; ++t) {
      const double area = h * w * (0.08 + 0.92 * unit(gen));
      const double ratio = std::exp(std::log(0.75) + (std::log(4.0 / 3) - std::log(0.75)) * unit(gen));
      const int cw = static_cast<int>(std::lround(std::sqrt(area * ratio)));
      const int ch = static_cast<int>(std::lround(std::sqrt(area / ratio)));
      if (cw > 0 && ch > 0 && cw <= w && ch <= h) return {double(ch) * cw / (h * w), double(cw) / ch};
    }
    return {1.0, double(w) / h};
  };
  std::vector<double> ours(2 * bins, 0), theirs(2 * bins, 0);
  const auto add = [&](std::vector<double>& hist, double area, double aspect) {
    hist[std::min(bins - 1, static_cast<int>(area * bins))] += 1;
    hist[bins + std::min(bins - 1, std::max(0, static_cast<int>((std::log(aspect) - std::log(0.75)) /
                                                                (std::log(4.0 / 3) - std::log(0.75)) * bins)))] += 1;
  };
  Rng rng(11);
  for (int i = 0; i < draws; ++i) {
    const CropBox b = random_resized_crop(h, w, rng);
    EXPECT_GE(b.top, 0);
    EXPECT_LE(b.top + b.height, h);
    EXPECT_LE(b.left + b.width, w);
    add(ours, b.height * b.width / (h * w), b.width / b.height);
    const auto [area, aspect] = reference();
    add(theirs, area, aspect);
  }
  for (int k = 0; k < 2 * bins; ++k) {
    // Each bin's count is binomial: 5 standard deviations of the difference of two.
    const double p = theirs[k] / draws, sd = std::sqrt(2 * draws * p * (1 - p));
    EXPECT_NEAR(ours[k], theirs[k], 5 * sd + 5) << (k < bins ? "area bin " : "aspect bin ") << k % bins;
  }
}

}  // namespace
}  // namespace ddl
