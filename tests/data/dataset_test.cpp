// The HDF5 dataset format: round trips, shards, and one clear InputError for every kind of bad file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <numeric>

#include "core/data/dataset_format.hpp"
#include "core/data/dataset_writer.hpp"
#include "core/data/hdf5.hpp"
#include "core/data/image_dataset.hpp"
#include "core/error.hpp"
#include "tests/data/fixtures.hpp"

namespace ddl {
namespace {

using test::pattern;
using test::pattern_set;
using test::TempDir;

// The message of the InputError that `fn` throws ("" when none).
template <typename Fn>
std::string input_error(Fn fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ImageDataset, RoundTripKeepsPixelsLabelsNamesAndStatistics) {
  TempDir dir;
  const auto set = pattern_set(37, 4, 5, 3);
  write_image_dataset(set, dir / "d.h5", 1);
  ImageDataset ds(dir / "d.h5");
  ASSERT_EQ(ds.size(), 37u);
  EXPECT_EQ(ds.height(), 4);
  EXPECT_EQ(ds.width(), 5);
  EXPECT_EQ(ds.channels(), 3);
  EXPECT_EQ(ds.class_names(), set.class_names);
  EXPECT_EQ(ds.labels(), set.labels);
  std::vector<std::size_t> idx = {36, 0, 17};
  std::vector<std::uint8_t> px(3 * ds.image_bytes());
  ds.read(idx, px);
  for (std::size_t k = 0; k < idx.size(); ++k)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 5; ++x)
        for (int c = 0; c < 3; ++c) ASSERT_EQ(px[k * ds.image_bytes() + (y * 5 + x) * 3 + c], pattern(idx[k], y, x, c));
  double mean0 = 0;
  for (std::size_t i = 0; i < set.pixels.size(); i += 3) mean0 += set.pixels[i] / 255.0;
  EXPECT_NEAR(ds.channel_mean()[0], mean0 / (set.pixels.size() / 3), 1e-9);
}

TEST(ImageDataset, ImagesOfAChunkEachAreReadWholeAndInOrder) {
  // 32x32x3 images take a chunk each, which the reader reads directly rather than through a selection.
  TempDir dir;
  write_image_dataset(pattern_set(20, 32, 32, 3), dir / "c.h5", 1);
  ImageDataset ds(dir / "c.h5");
  const std::vector<std::size_t> idx = {19, 0, 7, 7, 12};
  std::vector<std::uint8_t> px(idx.size() * ds.image_bytes());
  ds.read(idx, px);
  for (std::size_t k = 0; k < idx.size(); ++k)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(px[k * ds.image_bytes() + (y * 32 + x) * 3 + c], pattern(idx[k], y, x, c)) << k;
  std::filesystem::resize_file(dir / "c.h5", std::filesystem::file_size(dir / "c.h5") / 2);
  const std::vector<std::size_t> last{19};
  EXPECT_NE(input_error([&] { ds.read(last, std::span(px).first(ds.image_bytes())); }).find("c.h5: "),
            std::string::npos);
}

TEST(ImageDataset, ShardsOpenByBaseNameOrAnyShardAndReadAcrossThem) {
  TempDir dir;
  const auto set = pattern_set(10, 2, 2, 2);
  const auto files = write_image_dataset(set, dir / "s.h5", 3);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[1], dir / "s-00001-of-00003.h5");
  for (const std::string& path : {dir / "s.h5", files[2]}) {
    ImageDataset ds(path);
    ASSERT_EQ(ds.size(), 10u);
    EXPECT_EQ(ds.files(), files);
    EXPECT_EQ(ds.shard_size(0), 3u);
    EXPECT_EQ(ds.labels(), set.labels);
    std::vector<std::size_t> idx = {9, 2, 3, 6};
    std::vector<std::uint8_t> px(idx.size() * ds.image_bytes());
    ds.read(idx, px);
    for (std::size_t k = 0; k < idx.size(); ++k) EXPECT_EQ(px[k * ds.image_bytes() + 5], pattern(idx[k], 0, 1, 2));
  }
}

TEST(ImageDataset, MissingShardIsNamed) {
  TempDir dir;
  write_image_dataset(pattern_set(6, 2, 2, 2), dir / "s.h5", 3);
  std::filesystem::remove(dir / "s-00002-of-00003.h5");
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "s.h5"); }).find("s-00002-of-00003.h5: no such file"),
            std::string::npos);
}

TEST(ImageDataset, MissingFile) {
  TempDir dir;
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "none.h5"); }).find("no such file"), std::string::npos);
}

TEST(ImageDataset, CorruptFile) {
  TempDir dir;
  std::ofstream(dir / "bad.h5") << "this is not HDF5 at all";
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "bad.h5"); }).find("not an HDF5 file"), std::string::npos);
}

TEST(ImageDataset, TruncatedFile) {
  TempDir dir;
  write_image_dataset(pattern_set(50, 8, 8, 2), dir / "t.h5", 1);
  std::filesystem::resize_file(dir / "t.h5", std::filesystem::file_size(dir / "t.h5") / 2);
  EXPECT_NE(input_error([&] {
              ImageDataset ds(dir / "t.h5");
              std::vector<std::size_t> all(ds.size());
              std::iota(all.begin(), all.end(), 0);
              std::vector<std::uint8_t> px(all.size() * ds.image_bytes());
              ds.read(all, px);
            }),
            "");
}

TEST(ImageDataset, AFileCutShortWhileOpenIsNamedNotReadAsZeros) {
  TempDir dir;
  write_image_dataset(pattern_set(50, 8, 8, 2), dir / "t.h5", 1);
  ImageDataset ds(dir / "t.h5");
  const std::vector<std::size_t> first{0};
  std::vector<std::uint8_t> px(ds.image_bytes());
  ds.read(first, px);
  std::filesystem::resize_file(dir / "t.h5", std::filesystem::file_size(dir / "t.h5") / 2);
  const std::vector<std::size_t> last{49};
  EXPECT_NE(input_error([&] { ds.read(last, px); }).find("t.h5: the file was cut short while it was being read"),
            std::string::npos);
}

TEST(ImageDataset, NotADdlDataset) {
  TempDir dir;
  { h5::Handle f = h5::create_file(dir / "other.h5"); }
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "other.h5"); }).find("not a ddl image dataset"), std::string::npos);
}

TEST(ImageDataset, WrongFormatVersion) {
  TempDir dir;
  write_image_dataset(pattern_set(4, 2, 2, 2), dir / "v.h5", 1);
  {
    h5::Handle f(H5Fopen((dir / "v.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    h5::write_attribute(f, "format_version", std::int64_t{99});
  }
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "v.h5"); }).find("format version 99"), std::string::npos);
}

// Writes a ddl-format file by hand so that it can be inconsistent.
void write_raw(const std::string& path, hsize_t images, hsize_t labels, std::int32_t label_value) {
  h5::Handle f = h5::create_file(path);
  std::vector<std::uint8_t> px(images * 2 * 2 * 3, 1);
  h5::write_dataset<std::uint8_t>(f, "images", px, {images, 2, 2, 3});
  std::vector<std::int32_t> l(labels, label_value);
  h5::write_dataset<std::int32_t>(f, "labels", l, {labels});
  h5::write_attribute(f, "ddl_format", std::string("ddl-images"));
  h5::write_attribute(f, "format_version", std::int64_t{1});
  h5::write_attribute(f, "class_names", std::vector<std::string>{"a", "b"});
  h5::write_attribute(f, "channel_mean", std::vector<double>{0, 0, 0});
  h5::write_attribute(f, "channel_std", std::vector<double>{1, 1, 1});
}

TEST(ImageDataset, ImageAndLabelCountsDiffer) {
  TempDir dir;
  write_raw(dir / "c.h5", 3, 2, 0);
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "c.h5"); }).find("3 images but 2 labels"), std::string::npos);
}

TEST(ImageDataset, LabelOutOfRange) {
  TempDir dir;
  write_raw(dir / "l.h5", 2, 2, 5);
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "l.h5"); }).find("label 5 of image 0 is outside [0, 2)"),
            std::string::npos);
}

TEST(ImageDataset, EmptyDataset) {
  TempDir dir;
  write_raw(dir / "e.h5", 0, 0, 0);
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "e.h5"); }).find("holds no images"), std::string::npos);
  EXPECT_NE(input_error([&] { write_image_dataset(ImageSet{2, 2, 3, {"a"}, {}, {}}, dir / "x.h5", 1); }), "");
}

TEST(ImageDataset, AnAttributeOfSeveralValuesWhereOneIsExpectedIsRefused) {
  // Reading it into one int64 used to let HDF5 write all of its values over the stack.
  TempDir dir;
  write_raw(dir / "a.h5", 2, 2, 0);
  {
    h5::Handle f = h5::open_file_for_update(dir / "a.h5");
    h5::write_attribute(f, "format_version", std::vector<double>(64, 1.0));
  }
  EXPECT_NE(
      input_error([&] { ImageDataset ds(dir / "a.h5"); }).find("attribute 'format_version' is not a single number"),
      std::string::npos);
  {
    h5::Handle f = h5::open_file_for_update(dir / "a.h5");
    h5::write_attribute(f, "format_version", std::string("1"));
  }
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "a.h5"); }).find("attribute 'format_version' is not a number"),
            std::string::npos);
}

TEST(ImageDataset, CountsLargerThanTheFileAreRefusedBeforeAllocating) {
  TempDir dir;
  // A labels dataset of 2^40 values that were never written takes no space in the file; reading it would
  // allocate 4 TiB.
  write_raw(dir / "l.h5", 2, 2, 0);
  {
    h5::Handle f = h5::open_file_for_update(dir / "l.h5");
    H5Ldelete(f.get(), "labels", H5P_DEFAULT);
    h5::create_vector<std::int32_t>(f, "labels", std::size_t{1} << 40);
  }
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "l.h5"); }).find("dataset 'labels' claims 1099511627776 values"),
            std::string::npos);
  // Images of 2^20 x 2^20 pixels in a file of a few KB.
  {
    h5::Handle f = h5::create_file(dir / "i.h5");
    const hsize_t shape[4] = {1, 1 << 20, 1 << 20, 3};
    h5::Handle space(H5Screate_simple(4, shape, nullptr));
    h5::Handle images(
        H5Dcreate2(f.get(), "images", H5T_NATIVE_UINT8, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    h5::write_dataset<std::int32_t>(f, "labels", std::vector<std::int32_t>{0}, {1});
    h5::write_attribute(f, "ddl_format", std::string("ddl-images"));
    h5::write_attribute(f, "format_version", std::int64_t{1});
  }
  EXPECT_NE(input_error([&] { ImageDataset ds(dir / "i.h5"); }).find("take more bytes than the file holds"),
            std::string::npos);
}

// Mounts a file system of 1 MiB at `dir` (root only); false when it cannot.
bool mount_small_disk(const std::string& dir) {
  std::filesystem::create_directories(dir);
  return std::system(("mount -t tmpfs -o size=1m tmpfs " + dir + " 2>/dev/null").c_str()) == 0;
}

TEST(DatasetWriter, AFullDiskLeavesNoTemporaryFileAndSaysSo) {
  // As ddl_data and ddl_train do: HDF5's own clean-up at exit crashes closing a file whose flush failed.
  // (Only possible before HDF5's first use: CTest runs each test in a process of its own.)
  H5dont_atexit();
  TempDir dir;
  const std::string disk = dir / "disk";
  if (!mount_small_disk(disk)) GTEST_SKIP() << "cannot mount a tmpfs (needs root)";
  std::string message;
  try {
    write_image_dataset(pattern_set(600, 32, 32, 2), disk + "/big.h5", 2);  // 900 KiB a shard: the second fails
  } catch (const Error& e) {
    message = e.what();
  }
  const auto left = std::distance(std::filesystem::directory_iterator(disk), std::filesystem::directory_iterator());
  std::system(("umount " + disk).c_str());
  EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
  EXPECT_NE(message.find("big-00001-of-00002.h5.tmp"), std::string::npos) << message;
  EXPECT_EQ(left, 0) << "the temporary file or the first shard was left behind";
}

TEST(DatasetWriter, AnOutputThatIsADirectoryIsRefusedAndLeavesNoTemporaryFile) {
  TempDir dir;
  std::filesystem::create_directories(dir / "out.h5");
  EXPECT_NE(input_error([&] {
              write_image_dataset(pattern_set(4, 2, 2, 2), dir / "out.h5", 1);
            }).find("out.h5: is a directory"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "out.h5.tmp"));
}

TEST(ShuffleSplit, DisjointSeededAndComplete) {
  const auto set = pattern_set(100, 1, 1, 10);
  auto [train, val] = shuffle_split(set, 0.2, 3);
  EXPECT_EQ(train.size(), 80u);
  EXPECT_EQ(val.size(), 20u);
  // pattern(i, 0, 0, 0) = 7i mod 256 identifies the image: each appears exactly once overall.
  std::vector<int> seen(256, 0);
  for (auto* part : {&train, &val})
    for (std::size_t k = 0; k < part->size(); ++k) ++seen[part->pixels[k * 3]];
  int total = 0;
  for (int s : seen) {
    EXPECT_LE(s, 1);
    total += s;
  }
  EXPECT_EQ(total, 100);
  auto [train2, val2] = shuffle_split(set, 0.2, 3);
  EXPECT_EQ(val.pixels, val2.pixels);
  auto [train3, val3] = shuffle_split(set, 0.2, 4);
  EXPECT_NE(val.pixels, val3.pixels);
}

}  // namespace
}  // namespace ddl
