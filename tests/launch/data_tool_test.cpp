// ddl_data: info on a dataset and on a checkpoint, import into shard files that ddl_train trains from,
// and bad input refused in one line.
#include "tests/launch/process_test_fixture.hpp"

namespace ddl {
namespace {

TEST_F(DdlTrain, DataInfoDescribesTheSample) {
  const auto r = run(kData + " info " + (*dir_ / "sample.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("images 4800, shape 32x32x3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("airplane"), std::string::npos) << r.out;
}

TEST_F(DdlTrain, TrainsFromShardFilesOnSeveralRanks) {
  const auto import = run(kData + " import --from " + (*dir_ / "cifar10_sample") + " --output " + (scratch_ / "s.h5") +
                          " --shards 3 --seed 1");
  ASSERT_EQ(import.exit_code, 0) << import.err;
  EXPECT_NE(import.out.find("s-00002-of-00003.h5"), std::string::npos) << import.out;
  const auto r = run(kMpirun + " -np 2 " + kTrain + " --train " + (scratch_ / "s-00001-of-00003.h5") +
                     " --val-fraction 0.1 --epochs 1 --steps-per-epoch 5 --progress never");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("5400 training / 600 validation images"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("final validation accuracy"), std::string::npos) << r.out;
}

// The sample's JPEG files kept as they are: the dataset is their bytes and little more, and without a crop
// (the centre crop of the whole image, fraction 1) ddl_train trains the same bits from it as from the pixel
// store, on 2 ranks with flips, the images decoded on the loader's threads.
TEST_F(DdlTrain, TheSampleStoredEncodedTrainsAsThePixelStoreDoes) {
  const std::string encoded = scratch_ / "e.h5";
  const auto import = run(kData + " import --store encoded --from " + (*dir_ / "cifar10_sample") + " --output " +
                          encoded + " --val-fraction 0.2 --seed 1");
  ASSERT_EQ(import.exit_code, 0) << import.err;
  EXPECT_NE(import.out.find("imported 6000 images (encoded, 10 classes; 0 re-encoded"), std::string::npos)
      << import.out;
  EXPECT_NE(import.out.find("(1.000x)"), std::string::npos) << import.out;
  std::uintmax_t jpeg_bytes = 0;
  for (const auto& f : std::filesystem::recursive_directory_iterator(*dir_ / "cifar10_sample"))
    if (f.is_regular_file()) jpeg_bytes += f.file_size();
  const auto stored = std::filesystem::file_size(encoded) + std::filesystem::file_size(scratch_ / "e_val.h5");
  EXPECT_LT(static_cast<double>(stored), 1.05 * static_cast<double>(jpeg_bytes));
  const auto info = run(kData + " info " + encoded);
  EXPECT_NE(info.out.find("images 4800, encoded JPEG files, sides 32 to 32 pixels, 10 classes, format version 2"),
            std::string::npos)
      << info.out;
  const std::string args =
      " --model seed_cnn --epochs 2 --steps-per-epoch 20 --batch-size 16 --threads 1 --random-flip "
      "--val-crop-fraction 1 --loader-threads 2 --progress never --checkpoint-dir ";
  const auto from_jpegs = run(kMpirun + " -np 2 " + kTrain + " --train " + encoded + " --val " +
                              (scratch_ / "e_val.h5") + args + (scratch_ / "a"));
  ASSERT_EQ(from_jpegs.exit_code, 0) << from_jpegs.err;
  EXPECT_NE(from_jpegs.out.find("JPEG files decoded on 2 loader threads a rank, centre-cropped to 32x32"),
            std::string::npos)
      << from_jpegs.out;
  EXPECT_NE(from_jpegs.out.find("data wait "), std::string::npos) << from_jpegs.out;
  const auto from_pixels = run(kMpirun + " -np 2 " + kTrain + " --train " + (*dir_ / "sample.h5") + " --val " +
                               (*dir_ / "sample_val.h5") + args + (scratch_ / "b"));
  ASSERT_EQ(from_pixels.exit_code, 0) << from_pixels.err;
  EXPECT_EQ(params(scratch_ / "a/last.h5"), params(scratch_ / "b/last.h5"));
  // A pixel-store option that an encoded dataset cannot take is refused in one line.
  expect_clean_error(run(kTrain + " --train " + encoded + " --random-crop-padding 4 --progress never"),
                     "augment them with --random-resized-crop, not --random-crop-padding");
}

TEST_F(DdlTrain, DataToolRejectsBadInput) {
  auto r = run(kData);
  EXPECT_EQ(r.exit_code, 2);
  r = run(kData + " info " + (scratch_ / "nothing.h5"));
  expect_clean_error(r, "nothing.h5: no such file");
  r = run(kData + " import --from " + (scratch_ / "nowhere") + " --output " + (scratch_ / "x.h5"));
  expect_clean_error(r, "--from " + (scratch_ / "nowhere") + ": no such file or directory");
  // An existing folder as --output: refused before decoding, nothing left in it.
  std::filesystem::create_directories(scratch_ / "out");
  r = run(kData + " import --from " + (*dir_ / "cifar10_sample") + " --output " + (scratch_ / "out"));
  expect_clean_error(r, "--output " + (scratch_ / "out") + " is a directory; give a file name");
  EXPECT_TRUE(std::filesystem::is_empty(scratch_ / "out"));
  EXPECT_FALSE(std::filesystem::exists(scratch_ / "out.tmp"));
  // Boost.Program_options' message of this error substituted the argument into itself forever (fuzzing).
  r = run("timeout 10 " + kData + " import --from x --output y.h5 '--z%original_token%'");
  expect_clean_error(r, "cannot parse '--z%original_token%': it holds a '%name%'");
}

TEST_F(DdlTrain, DataInfoDescribesACheckpoint) {
  const std::string ckpt = scratch_ / "ckpt";
  const auto t = run(kTrain + train_args("--epochs 1 --steps-per-epoch 2 --optimizer sgd --checkpoint-dir " + ckpt));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const auto r = run(kData + " info " + ckpt + "/last.h5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("checkpoint " + ckpt + "/last.h5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model seed_cnn, 10 classes, 282250 parameters in 8 tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epochs done 1, best validation accuracy 0."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer sgd, lr 0.001, batch size 64 per rank"), std::string::npos) << r.out;
  // A damaged one is refused as --resume would refuse it, in one line.
  std::filesystem::resize_file(ckpt + "/last.h5", std::filesystem::file_size(ckpt + "/last.h5") / 2);
  const auto bad = run(kData + " info " + ckpt + "/last.h5");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(test::count_lines(bad.err), 1u) << bad.err;
  EXPECT_NE(bad.err.find("last.h5"), std::string::npos) << bad.err;
}


}  // namespace
}  // namespace ddl
