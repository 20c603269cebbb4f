// ddl_train on one rank (and a few across ranks) as users run it: its outputs, its options and
// configuration files, resuming and starting from a checkpoint, precision, the timeline, and the one clear
// line that ends a run on bad input.
#include <cstring>

#include "core/data/dataset_writer.hpp"
#include "tests/launch/process_test_fixture.hpp"

namespace ddl {
namespace {

TEST_F(DdlTrain, LearnsAndWritesMetricsAndCheckpoints) {
  const std::string ckpt = scratch_ / "ckpt", metrics = scratch_ / "m.csv";
  const auto r = run(kTrain + train_args("--epochs 2 --checkpoint-dir " + ckpt + " --metrics " + metrics));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("total parameters: 282250"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 2/2"), std::string::npos) << r.out;
  const auto pos = r.out.find("final validation accuracy ");
  ASSERT_NE(pos, std::string::npos) << r.out;
  EXPECT_GT(std::stod(r.out.substr(pos + 26)), 0.25) << "2 epochs on the sample should beat chance (0.10) clearly";
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/last.h5"));
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/best.h5"));
  std::ifstream in(metrics);
  std::string header, line1, line2;
  std::getline(in, header);
  std::getline(in, line1);
  std::getline(in, line2);
  EXPECT_EQ(header.rfind("epoch,train_loss,train_accuracy,val_loss,val_accuracy", 0), 0u);
  EXPECT_EQ(line2.rfind("2,", 0), 0u) << line2;
}

TEST_F(DdlTrain, ConfigFileSetsOptionsAndTheCommandLineWins) {
  std::ofstream(scratch_ / "run.cfg")
      << "# a comment\nepochs = 1\nbatch-size = 16\nsteps-per-epoch = 3\noptimizer = sgd\n";
  const auto r = run(kTrain + train_args("--config " + (scratch_ / "run.cfg") + " --batch-size 8"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("batch 8 per rank"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer sgd"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 1/1"), std::string::npos) << r.out;
  std::ofstream(scratch_ / "bad.cfg") << "epochz = 3\n";
  expect_clean_error(run(kTrain + train_args("--config " + (scratch_ / "bad.cfg"))), "epochz");
}

TEST_F(DdlTrain, ResumeContinuesExactly) {
  const std::string straight = scratch_ / "straight", split = scratch_ / "split";
  const std::string opts =
      "--model seed_cnn_bn --random-flip --random-crop-padding 2 --threads 2 --steps-per-epoch 15 ";
  ASSERT_EQ(run(kTrain + train_args(opts + "--epochs 4 --checkpoint-dir " + straight)).exit_code, 0);
  auto first = run(kTrain + train_args(opts + "--epochs 2 --checkpoint-dir " + split));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto second = run(kTrain + train_args(opts + "--epochs 4 --checkpoint-dir " + split + " --resume auto"));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("resumed from"), std::string::npos);
  EXPECT_EQ(second.out.find("epoch 1/4"), std::string::npos) << "resumed run repeated epoch 1";
  const auto a = params(straight + "/last.h5"), b = params(split + "/last.h5");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "2 + 2 epochs differ from 4 epochs";
}

TEST_F(DdlTrain, VisionTransformerShapeAndAugmentationOptions) {
  const auto r = run(kTrain + train_args("--model vit_tiny --image-size 48 --patch-size 8 --depth 1 --width 32 "
                                         "--heads 2 --random-resized-crop --random-flip --normalize imagenet "
                                         "--epochs 1 --steps-per-epoch 4 --batch-size 16"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("37 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 1/1"), std::string::npos) << r.out;
  expect_clean_error(run(kTrain + train_args("--model vit_tiny --image-size 50")), "multiple of the patch size");
}

TEST_F(DdlTrain, ImagesOfAnotherSizeAreResampledToTheModels) {
  write_image_dataset(test::pattern_set(8, 16, 16, 2), scratch_ / "small.h5", 1);
  const auto r = run(kTrain + " --train " + (scratch_ / "small.h5") + " --epochs 1 --batch-size 4 --progress never");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("16x16x3 images resampled to 32x32"), std::string::npos) << r.out;
}

// BatchNorm running statistics inside residual blocks travel through the checkpoint: the resumed run
// ends with the same parameters and the same validation accuracy (evaluated with those statistics).
TEST_F(DdlTrain, ResNetResumesExactly) {
  const std::string straight = scratch_ / "rs", split = scratch_ / "rp";
  const std::string opts = "--model resnet18_cifar --image-size 16 --batch-size 8 --steps-per-epoch 3 --threads 2 ";
  const auto full = run(kTrain + train_args(opts + "--epochs 2 --checkpoint-dir " + straight));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  ASSERT_EQ(run(kTrain + train_args(opts + "--epochs 1 --checkpoint-dir " + split)).exit_code, 0);
  const auto resumed = run(kTrain + train_args(opts + "--epochs 2 --resume auto --checkpoint-dir " + split));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto a = params(straight + "/last.h5"), b = params(split + "/last.h5");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  auto accuracy = [](const std::string& out) { return out.substr(out.find("final validation accuracy")); };
  EXPECT_EQ(accuracy(full.out), accuracy(resumed.out));
}

// --cache-images: the same parameters whether the training images are read once into memory or from the
// file every step, on one rank and on two; auto keeps the small sample in memory and says so.
TEST_F(DdlTrain, ImagesKeptInMemoryTrainExactlyAsReadFromTheFile) {
  const std::string file = scratch_ / "file", memory = scratch_ / "memory", two = scratch_ / "two";
  const std::string args = "--epochs 2 --threads 1 --steps-per-epoch 5 --checkpoint-dir ";
  ASSERT_EQ(run(kTrain + train_args(args + file + " --cache-images off")).exit_code, 0);
  const auto r = run(kTrain + train_args(args + memory));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("training images in memory: 4800 (15 MB) read in"), std::string::npos) << r.out;
  EXPECT_EQ(params(file + "/last.h5"), params(memory + "/last.h5"));
  const auto r2 = run(kMpirun + " -np 2 " + kTrain + train_args(args + two + " --cache-images on --batch-size 32"));
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  const auto r3 = run(kMpirun + " -np 2 " + kTrain + train_args(args + file + " --cache-images off --batch-size 32"));
  ASSERT_EQ(r3.exit_code, 0) << r3.err;
  EXPECT_EQ(params(two + "/last.h5"), params(file + "/last.h5"));
}

TEST_F(DdlTrain, Bf16TracksF32AndItsCheckpointsResumeInF32) {
  const auto bf16 = run(kTrain + train_args("--epochs 2 --threads 2 --precision bf16 --checkpoint-dir " +
                                            (scratch_ / "bf16")));
  if (bf16_refused(bf16)) return;
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_NE(bf16.out.find("precision bf16: convolutions, dense layers and matrix products multiply in bf16"),
            std::string::npos) << bf16.out;
  EXPECT_NE(bf16.out.find("activations bf16 between the layers that take it"), std::string::npos) << bf16.out;
  const auto f32 = run(kTrain + train_args("--epochs 2 --threads 2"));
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  // Two epochs on the sample: the loss curves agree within 3% (measured: 0.1-0.7%).
  auto losses = [](const std::string& out) {
    std::vector<double> l;
    for (auto at = out.find("train loss "); at != std::string::npos; at = out.find("train loss ", at + 1))
      l.push_back(std::stod(out.substr(at + 11)));
    return l;
  };
  const auto lb = losses(bf16.out), lf = losses(f32.out);
  ASSERT_EQ(lb.size(), 2u) << bf16.out;
  ASSERT_EQ(lf.size(), 2u) << f32.out;
  for (std::size_t e = 0; e < 2; ++e) EXPECT_NEAR(lb[e], lf[e], 0.03 * lf[e]) << "epoch " << e + 1;
  // Checkpoints hold f32 weights: a bf16 run resumes in f32.
  const auto resumed = run(kTrain + train_args("--epochs 3 --threads 2 --precision f32 --resume auto --checkpoint-dir " +
                                               (scratch_ / "bf16")));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("options changed since the checkpoint: precision bf16 -> f32"), std::string::npos)
      << resumed.out;
  EXPECT_NE(resumed.out.find("epoch 3/3"), std::string::npos) << resumed.out;
}

TEST_F(DdlTrain, PrecisionAutoIsBf16WhereTheCpuComputesItElseF32WithANote) {
  const std::string auto_run = kTrain + train_args("--epochs 1 --steps-per-epoch 2 --threads 1 --precision auto");
  const std::string f32_note = "precision auto: f32 (a CPU of this run has neither AVX512-BF16 nor AMX)";
  const auto r = run(auto_run);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("precision bf16: convolutions") != std::string::npos, cpu_computes_bf16()) << r.out;
  EXPECT_EQ(r.out.find(f32_note) != std::string::npos, !cpu_computes_bf16()) << r.out;
  // With oneDNN capped below bf16 every CPU takes the other path: auto trains in f32, bf16 is refused.
  const std::string capped = "ONEDNN_MAX_CPU_ISA=AVX512_CORE ";
  const auto f32 = run(capped + auto_run);
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  EXPECT_NE(f32.out.find(f32_note), std::string::npos) << f32.out;
  EXPECT_EQ(f32.out.find("precision bf16"), std::string::npos) << f32.out;
  expect_clean_error(run(capped + kTrain + train_args("--precision bf16")),
                     "--precision bf16: this CPU has neither AVX512-BF16 nor AMX");
}

TEST_F(DdlTrain, InitStartsFromACheckpointsWeights) {
  const std::string source = scratch_ / "source", weights = source + "/last.h5";
  ASSERT_EQ(run(kTrain + train_args("--epochs 1 --steps-per-epoch 2 --checkpoint-dir " + source)).exit_code, 0);
  // 12 classes here, 10 there: the classifier, on the second stage, starts afresh; rank 0 says so.
  const auto r = run(kMpirun + " -np 2 " + kTrain +
                     train_args("--epochs 1 --steps-per-epoch 2 --num-classes 12 --pipeline-stages 2 --threads 1 "
                                "--init " + weights));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("initialised from " + weights +
                       "; 6.weight, 6.bias start afresh (its classifier is for 10 classes, this run's for 12)\n"),
            std::string::npos)
      << r.out;
  // The same classes: every weight comes from the checkpoint, and a step of learning rate 1e-30 keeps them
  // (one that is exactly 0, a dead unit's bias, moves by less than 1e-25).
  const std::string same = scratch_ / "same";
  const auto kept = run(kTrain + train_args("--epochs 1 --steps-per-epoch 1 --optimizer sgd --momentum 0 --lr 1e-30 "
                                            "--init " + weights + " --checkpoint-dir " + same));
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_NE(kept.out.find("initialised from " + weights + "\n"), std::string::npos) << kept.out;
  const auto before = params(weights), after = params(same + "/last.h5");
  ASSERT_EQ(before.size(), after.size());
  for (std::size_t i = 0; i < before.size(); ++i)
    if (std::abs(before[i]) > 1e-20f)
      ASSERT_EQ(before[i], after[i]) << i;
    else
      ASSERT_LT(std::abs(after[i] - before[i]), 1e-25f) << i;
  expect_every_rank_refuses(
      run(kMpirun + " -np 2 " + kTrain + train_args("--model seed_cnn_bn --threads 1 --init " + weights)), 2,
      weights + ": weights of model seed_cnn, not of --model seed_cnn_bn");
}

TEST_F(DdlTrain, TimelineHoldsEveryRanksSpans) {
  const std::string path = scratch_ / "trace.json";
  const auto r = run(kMpirun + " -np 2 " + kTrain +
                     train_args("--epochs 1 --steps-per-epoch 3 --threads 1 --pipeline-stages 2 --micro-batches 2 "
                                "--timeline " + path));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("timeline of 2 ranks in " + path), std::string::npos) << r.out;
  std::ifstream in(path);
  const std::string trace((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(trace.rfind("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", 0), 0u);
  EXPECT_EQ(trace.substr(trace.size() - 4), "\n]}\n");
  for (const std::string event :
       {"\"name\": \"rank 1 (replica 0, stage 1)\"", "\"name\": \"wait for data\", \"ph\": \"X\", \"pid\": 0",
        "\"name\": \"receive activations\", \"ph\": \"X\", \"pid\": 1",
        "\"name\": \"receive gradients\", \"ph\": \"X\", \"pid\": 0", "\"name\": \"backward\"",
        "\"args\": {\"micro-batch\": 1}", "\"name\": \"gradient all-reduce\"", "\"name\": \"forward (evaluation)\""})
    EXPECT_NE(trace.find(event), std::string::npos) << event;
  // Three steps of two micro-batches on each of the two stages.
  std::size_t backwards = 0;
  for (auto at = trace.find("\"backward\""); at != std::string::npos; at = trace.find("\"backward\"", at + 1)) ++backwards;
  EXPECT_EQ(backwards, 12u);
}

TEST_F(DdlTrain, BadInputEndsWithOneClearLine) {
  expect_clean_error(run(kTrain + " --epochs 1"), "--train is required");
  expect_clean_error(run(kTrain + " --train " + (scratch_ / "missing.h5")), "missing.h5: no such file");
  expect_clean_error(run(kTrain + train_args("--optimizer rmsprop")), "--optimizer must be adam, sgd, lars or lamb");
  expect_clean_error(run(kTrain + train_args("--batch-size zero")), "batch-size");
  expect_clean_error(run(kTrain + train_args("--model nonet")), "unknown model 'nonet'");
  expect_clean_error(run(kTrain + train_args("--bogus-option 1")), "bogus-option");
  std::ofstream(scratch_ / "corrupt.h5") << "garbage";
  expect_clean_error(run(kTrain + " --train " + (scratch_ / "corrupt.h5")), "not an HDF5 file");
  write_image_dataset(test::pattern_set(8, 16, 16, 2), scratch_ / "small.h5", 1);
  expect_clean_error(run(kTrain + " --train " + (scratch_ / "small.h5")),
                     "the training set has 8 images, fewer than one global batch of 64");
  expect_clean_error(run(kTrain + train_args("--resume " + (scratch_ / "nothing.h5"))), "nothing.h5: no such file");
  // Found by trying ddl as a tester would: each was accepted silently or crashed.
  expect_clean_error(run(kTrain + train_args("--epochs 1") + " stray.h5"),
                     "unexpected argument 'stray.h5' (every option starts with --");
  expect_clean_error(run(kTrain + train_args("--threads 65536")), "--threads must be in [0, 1024]");
  expect_clean_error(run(kTrain + train_args("--cache-images yes")), "--cache-images must be auto, on or off");
  expect_clean_error(run(kTrain + train_args("--image-size 7")),
                     "model seed_cnn takes 32x32 images; --image-size does not apply to it");
  expect_clean_error(run(kTrain + train_args("--mean 0.5,0.5,0.5")),
                     "--mean and --std apply to --normalize meanstd, not scale");
  std::ofstream(scratch_ / "twice.conf") << "lr = 0.01\nepochs = 2\nlr = 0.1\n";
  expect_clean_error(run(kTrain + train_args("--config " + (scratch_ / "twice.conf"))),
                     "twice.conf: 'lr' is given twice (lines 1 and 3)");
  expect_clean_error(run(kTrain + " --train " + scratch_.path().string()), "is a folder: import its images first");
  expect_clean_error(run(kTrain + train_args("--metrics /no/such/dir/m.csv")), "there is no folder /no/such/dir");
}

TEST_F(DdlTrain, ResumingSaysWhatChangedAndRefusesAnotherOptimizer) {
  const std::string args = "--steps-per-epoch 2 --threads 1 --checkpoint-dir " + (scratch_ / "ckpt");
  ASSERT_EQ(run(kTrain + train_args(args + " --epochs 1")).exit_code, 0);
  const auto changed = run(kTrain + train_args(args + " --epochs 2 --lr 0.01 --resume auto"));
  ASSERT_EQ(changed.exit_code, 0) << changed.err;
  EXPECT_NE(changed.out.find("options changed since the checkpoint: lr 0.001 -> 0.01\n"), std::string::npos)
      << changed.out;
  const auto done = run(kTrain + train_args(args + " --epochs 2 --lr 0.01 --resume auto"));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_NE(done.out.find("nothing to train: " + (scratch_ / "ckpt") + "/last.h5 holds 2 epochs, and --epochs 2 "
                          "counts all epochs"),
            std::string::npos)
      << done.out;
  expect_clean_error(run(kTrain + train_args(args + " --epochs 3 --optimizer sgd --resume " + (scratch_ / "ckpt") +
                                             "/last.h5")),
                     "its optimizer state is m, step, v, not this run's optimizer's (velocity)");
}

TEST_F(DdlTrain, BadInputStopsEveryRank) {
  const auto r = run(kMpirun + " -np 2 " + kTrain + " --train " + (scratch_ / "missing.h5"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("ddl_train: error (rank 0): "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ddl_train: error (rank 1): "), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 30.0);
}

TEST_F(DdlTrain, MismatchedConfigurationsAreNamed) {
  const auto r = run(kMpirun + " -np 2 sh -c '" + kTrain + train_args("--epochs 1 --seed $OMPI_COMM_WORLD_RANK") + "'");
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("the configuration (options, model) differs between rank 0 and rank(s) 1"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace ddl
