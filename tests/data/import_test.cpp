// Importers: image folders of PNG and JPEG files, the CIFAR binary formats, and their bad inputs.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "core/data/cifar_binary.hpp"
#include "core/data/image_decode.hpp"
#include "core/data/image_folder.hpp"
#include "core/data/image_resize.hpp"
#include "core/error.hpp"
#include "tests/data/fixtures.hpp"

namespace ddl {
namespace {

using test::pattern;
using test::TempDir;
namespace fs = std::filesystem;

TEST(ImageFolder, ClassesSortedFilesSortedPixelsExact) {
  TempDir dir;
  for (const char* c : {"zebra", "ant"}) fs::create_directories(dir / c);
  test::write_png(dir / "zebra/b.png", 3, 4, 2);
  test::write_png(dir / "zebra/a.png", 3, 4, 1);
  test::write_png(dir / "ant/x.png", 3, 4, 0);
  std::ofstream(dir / "ant/readme.txt") << "not an image";
  const ImageSet set = import_image_folder(dir.path().string(), 2);
  EXPECT_EQ(set.class_names, (std::vector<std::string>{"ant", "zebra"}));
  EXPECT_EQ(set.labels, (std::vector<std::int32_t>{0, 1, 1}));
  EXPECT_EQ(set.height, 3);
  EXPECT_EQ(set.width, 4);
  // Files in order ant/x (seed 0), zebra/a (1), zebra/b (2): PNG is lossless.
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(set.pixels[i * set.image_bytes() + (2 * 4 + 3) * 3 + 1], pattern(i, 2, 3, 1));
}

TEST(ImageFolder, JpegDecodes) {
  TempDir dir;
  fs::create_directories(dir / "grey");
  test::write_jpeg(dir / "grey/1.jpg", 8, 8);
  const ImageSet set = import_image_folder(dir.path().string(), 1);
  ASSERT_EQ(set.size(), 1u);
  for (auto v : set.pixels) EXPECT_NEAR(v, 128, 2);
}

TEST(ImageFolder, DifferentSizesAreNamed) {
  TempDir dir;
  fs::create_directories(dir / "a");
  test::write_png(dir / "a/1.png", 4, 4, 0);
  test::write_png(dir / "a/2.png", 5, 4, 0);
  try {
    import_image_folder(dir.path().string(), 2);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("2.png: image is 5x4, the others 4x4"), std::string::npos) << e.what();
  }
}

TEST(ImageFolder, ResizeMakesEverySizeOneSquare) {
  TempDir dir;
  fs::create_directories(dir / "a");
  test::write_png(dir / "a/1.png", 4, 4, 0);
  test::write_png(dir / "a/2.png", 5, 8, 0);
  const ImageSet set = import_image_folder(dir.path().string(), 2, 3);
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(set.height, 3);
  EXPECT_EQ(set.width, 3);
  EXPECT_EQ(set.pixels.size(), 2u * 27u);
  EXPECT_THROW(import_image_folder(dir.path().string(), 2, -1), InputError);
}

TEST(ImageResize, CentreSquareAndCropBoxes) {
  const CropBox c = center_square(4, 10);
  EXPECT_FLOAT_EQ(c.top, 0);
  EXPECT_FLOAT_EQ(c.left, 3);
  EXPECT_FLOAT_EQ(c.height, 4);
  EXPECT_FLOAT_EQ(c.width, 4);
  Rng rng(3);
  for (int i = 0; i < 200; ++i) {
    const CropBox b = random_resized_crop(32, 48, rng);
    EXPECT_GE(b.top, 0);
    EXPECT_GE(b.left, 0);
    EXPECT_LE(b.top + b.height, 32);
    EXPECT_LE(b.left + b.width, 48);
    EXPECT_GE(b.height * b.width, 0.07f * 32 * 48);
    const float ratio = b.width / b.height;
    EXPECT_GE(ratio, 0.7f);
    EXPECT_LE(ratio, 1.45f);
  }
}

TEST(ImageResize, ConstantStaysConstantAndSameSizeIsACopy) {
  std::vector<std::uint8_t> flat(5 * 7 * 3, 77);
  for (auto v : resize_image(flat.data(), 5, 7, 3, {1.5f, 2.0f, 3.0f, 2.5f}, 9, 4)) EXPECT_EQ(v, 77);
  const ImageSet set = test::pattern_set(1, 5, 7, 1);
  EXPECT_EQ(resize_image(set.pixels.data(), 5, 7, 3, {0, 0, 5, 7}, 5, 7), set.pixels);
}

TEST(ImageFolder, CorruptJpegIsNamed) {
  TempDir dir;
  fs::create_directories(dir / "a");
  test::write_jpeg(dir / "a/good.jpg", 8, 8);
  test::write_jpeg(dir / "a/zbad.jpg", 8, 8);
  fs::resize_file(dir / "a/zbad.jpg", 40);
  try {
    import_image_folder(dir.path().string(), 2);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("zbad.jpg: corrupt JPEG"), std::string::npos) << e.what();
  }
}

TEST(ImageFolder, HiddenFilesAndFoldersAreSkipped) {
  TempDir dir;
  for (const char* c : {"a", "b", ".ipynb_checkpoints"}) fs::create_directories(dir / c);
  test::write_png(dir / "a/1.png", 3, 3, 0);
  test::write_png(dir / "b/1.png", 3, 3, 1);
  test::write_png(dir / ".ipynb_checkpoints/1.png", 3, 3, 2);
  std::ofstream(dir / "a/._1.png") << "macOS resource fork, not a PNG";
  test::write_png(dir / "b/.hidden.png", 3, 3, 3);
  const ImageSet set = import_image_folder(dir.path().string(), 1);
  EXPECT_EQ(set.class_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(set.size(), 2u);
}

TEST(ImageFolder, AnEmptyClassFolderIsRefusedByName) {
  TempDir dir;
  for (const char* c : {"cat", "dog", "empty"}) fs::create_directories(dir / c);
  test::write_png(dir / "cat/1.png", 3, 3, 0);
  test::write_png(dir / "dog/1.png", 3, 3, 1);
  std::ofstream(dir / "empty/notes.txt") << "no images here";
  try {
    import_image_folder(dir.path().string(), 1);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a class folder has no .jpg, .jpeg or .png image: " + (dir / "empty")),
              std::string::npos)
        << e.what();
  }
}

// A 2x2 JPEG in CMYK (written as Adobe's encoders write it: inverted, with their marker) or YCCK; every
// pixel is C, M, Y, K = 0, 255, 255, 0 (pure red) at the top and 0, 0, 0, 128 (mid grey) at the bottom.
void write_cmyk_jpeg(const std::string& path, J_COLOR_SPACE stored_as) {
  FILE* f = std::fopen(path.c_str(), "wb");
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = 16;
  cinfo.image_height = 16;
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, stored_as);
  jpeg_set_quality(&cinfo, 100, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    const bool top = cinfo.next_scanline < 8;
    std::vector<std::uint8_t> row;
    for (int x = 0; x < 16; ++x)
      for (int v : top ? std::vector<int>{0, 255, 255, 0} : std::vector<int>{0, 0, 0, 128})
        row.push_back(static_cast<std::uint8_t>(255 - v));
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

TEST(ImageDecode, CmykAndYcckJpegsBecomeRgb) {
  TempDir dir;
  for (J_COLOR_SPACE stored_as : {JCS_CMYK, JCS_YCCK}) {
    write_cmyk_jpeg(dir / "c.jpg", stored_as);
    const DecodedImage img = decode_image(dir / "c.jpg");
    ASSERT_EQ(img.height, 16);
    ASSERT_EQ(img.width, 16);
    ASSERT_EQ(img.rgb.size(), 16u * 16u * 3u);
    const std::uint8_t* top = &img.rgb[(2 * 16 + 5) * 3];
    const std::uint8_t* bottom = &img.rgb[(13 * 16 + 5) * 3];
    EXPECT_NEAR(top[0], 255, 4) << stored_as;
    EXPECT_NEAR(top[1], 0, 4) << stored_as;
    EXPECT_NEAR(top[2], 0, 4) << stored_as;
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(bottom[c], 127, 4) << stored_as;
  }
}

TEST(ImageDecode, AJpegThatEndsEarlyIsAnError) {
  // libjpeg only warns and fills the missing rows with grey.
  TempDir dir;
  test::write_jpeg(dir / "t.jpg", 64, 64, 100);
  fs::resize_file(dir / "t.jpg", fs::file_size(dir / "t.jpg") * 3 / 4);
  try {
    decode_image(dir / "t.jpg");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("t.jpg: corrupt JPEG (the file ends early (truncated))"), std::string::npos)
        << e.what();
  }
}

TEST(ImageDecode, AHugeImageIsRefusedBeforeItsPixelsAreAllocated) {
  // An 8x8 JPEG whose frame header claims 60000 x 60000 pixels (10.8 GB as RGB).
  TempDir dir;
  test::write_jpeg(dir / "h.jpg", 8, 8);
  std::fstream f(dir / "h.jpg", std::ios::in | std::ios::out | std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  std::size_t sof = 0;
  while (sof + 1 < bytes.size() && !(bytes[sof] == '\xFF' && bytes[sof + 1] == '\xC0')) ++sof;
  ASSERT_LT(sof + 9, bytes.size());
  for (std::size_t at : {sof + 5, sof + 7}) {  // height, then width, big-endian
    bytes[at] = static_cast<char>(60000 >> 8);
    bytes[at + 1] = static_cast<char>(60000 & 0xFF);
  }
  f.seekp(0);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  try {
    decode_image(dir / "h.jpg");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("h.jpg: image is 60000x60000, more than ddl reads"), std::string::npos)
        << e.what();
  }
}

TEST(ImageFolder, NotAnImageAndNoClasses) {
  TempDir dir;
  EXPECT_THROW(import_image_folder(dir.path().string(), 1), InputError);
  EXPECT_THROW(import_image_folder(dir / "missing", 1), InputError);
  try {
    import_image_folder(dir / "missing", 1);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing: no such directory"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "fake.jpg") << "hello";
  EXPECT_THROW(decode_image(dir / "fake.jpg"), InputError);
}

// One CIFAR record: label byte(s), then R, G and B planes of 1024 bytes.
void append_record(std::ofstream& out, std::vector<std::uint8_t> labels, std::uint8_t base) {
  for (auto l : labels) out.put(static_cast<char>(l));
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 1024; ++p) out.put(static_cast<char>(base + c * 10 + p % 7));
}

TEST(CifarBinary, Cifar10RecordsBecomeHwcImages) {
  TempDir dir;
  {
    std::ofstream a(dir / "data_batch_1.bin", std::ios::binary), b(dir / "data_batch_2.bin", std::ios::binary);
    append_record(a, {3}, 0);
    append_record(a, {9}, 100);
    append_record(b, {0}, 50);
    std::ofstream(dir / "test_batch.bin", std::ios::binary) << "ignored";
    std::ofstream meta(dir / "batches.meta.txt");
    for (const char* n : {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"})
      meta << n << "\n";
  }
  const ImageSet set = import_cifar_binary({dir.path().string()}, CifarVariant::cifar10);
  ASSERT_EQ(set.size(), 3u);
  EXPECT_EQ(set.labels, (std::vector<std::int32_t>{3, 9, 0}));
  EXPECT_EQ(set.class_names[3], "cat");
  // Pixel p = 8 of image 1: R = 100 + 8 % 7, G = 110 + 1, B = 120 + 1.
  EXPECT_EQ(set.pixels[1 * 3072 + 8 * 3 + 0], 101);
  EXPECT_EQ(set.pixels[1 * 3072 + 8 * 3 + 1], 111);
  EXPECT_EQ(set.pixels[1 * 3072 + 8 * 3 + 2], 121);
}

TEST(CifarBinary, Cifar100UsesTheFineLabel) {
  TempDir dir;
  {
    std::ofstream a(dir / "train.bin", std::ios::binary);
    append_record(a, {4, 77}, 0);
  }
  const ImageSet set = import_cifar_binary({dir / "train.bin"}, CifarVariant::cifar100);
  EXPECT_EQ(set.labels, (std::vector<std::int32_t>{77}));
  EXPECT_EQ(set.class_names.size(), 100u);
}

TEST(CifarBinary, BadSizesAndLabelsAreRejected) {
  TempDir dir;
  std::ofstream(dir / "short.bin", std::ios::binary) << "abc";
  EXPECT_THROW(import_cifar_binary({dir / "short.bin"}, CifarVariant::cifar10), InputError);
  {
    std::ofstream a(dir / "label.bin", std::ios::binary);
    append_record(a, {12}, 0);
  }
  EXPECT_THROW(import_cifar_binary({dir / "label.bin"}, CifarVariant::cifar10), InputError);
  EXPECT_THROW(import_cifar_binary({dir / "missing"}, CifarVariant::cifar10), InputError);
}

}  // namespace
}  // namespace ddl
