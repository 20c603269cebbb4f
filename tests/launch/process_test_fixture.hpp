// The shared part of the end-to-end tests of ddl's programs as users run them (ddl_data, ddl_train,
// ddl_eval, ddl_predict, on the sample data the repository ships, with and without mpirun): the DdlTrain
// fixture, which imports the sample once a test process, the programs' paths, and the helpers that more
// than one of the test files uses. Every file's tests are in the one suite DdlTrain, which the scripts that
// pick end-to-end tests by name (tests/launch/end_to_end_sample.sh, tests/sanitizers/run_sanitizers.sh,
// tests/launch/fresh_machine.sh) select as ^DdlTrain\.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "core/cpu_bf16.hpp"
#include "core/data/dataset_writer.hpp"
#include "core/data/hdf5.hpp"
#include "core/data/image_dataset.hpp"
#include "tests/data/fixtures.hpp"
#include "tests/launch/process.hpp"

namespace ddl {

using test::run_process;

inline const std::string kTrain = DDL_TRAIN_EXE;
// ddl_train with the faults of tests/launch/ddl_train_faults.cpp, from the environment.
inline const std::string kTrainFaults = DDL_TRAIN_FAULTS_EXE;
inline const std::string kData = DDL_DATA_EXE;
inline const std::string kEval = DDL_EVAL_EXE;
inline const std::string kPredict = DDL_PREDICT_EXE;
inline const std::string kMpirun = std::string(MPIEXEC_EXE) + " --oversubscribe";
inline const std::string kSample = DDL_SAMPLE_TARBALL;
inline const std::string kSignalRank = std::string("bash ") + DDL_SIGNAL_RANK;
inline const std::string kThreeHosts = "DDL_TRAIN=" + kTrain + " bash " + DDL_THREE_HOSTS;
inline const std::string kElasticRun = "env DDL_TRAIN=" + kTrain + " bash " + DDL_ELASTIC_RUN;

class DdlTrain : public ::testing::Test {
 public:
  static constexpr std::size_t kValImages = 240;
  static void SetUpTestSuite() {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    dir_ = new test::TempDir();
    const auto untar = run_process("tar xzf " + kSample + " -C " + dir_->path().string(), dir_->path().string());
    ASSERT_EQ(untar.exit_code, 0) << untar.err;
    const auto import = run_process(kData + " import --from " + (*dir_ / "cifar10_sample") + " --output " +
                                        (*dir_ / "sample.h5") + " --val-fraction 0.2 --seed 1",
                                    dir_->path().string());
    ASSERT_EQ(import.exit_code, 0) << import.err;
    ASSERT_NE(import.out.find("imported 6000 images (32x32x3, 10 classes)"), std::string::npos) << import.out;
    // The runs validate on the first kValImages held-out images: every epoch of every run evaluates them all,
    // and the full 1,200 cost a large model more than its training steps (ResNet-18 at 64x64: 1,200
    // forward passes against 3 steps of 32 images).
    ImageDataset held_out(*dir_ / "sample_val.h5");
    ImageSet part{held_out.height(), held_out.width(), held_out.channels(), held_out.class_names(), {}, {}};
    std::vector<std::size_t> first(kValImages);
    std::iota(first.begin(), first.end(), std::size_t{0});
    part.pixels.resize(kValImages * held_out.image_bytes());
    held_out.read(first, part.pixels);
    part.labels.assign(held_out.labels().begin(), held_out.labels().begin() + kValImages);
    write_image_dataset(part, *dir_ / "val.h5", 1);
  }
  static void TearDownTestSuite() { delete dir_; }

  std::string train_args(const std::string& extra) const {
    return " --train " + (*dir_ / "sample.h5") + " --val " + (*dir_ / "val.h5") + " --progress never " + extra;
  }
  test::ProcessResult run(const std::string& command) { return run_process(command, scratch_.path().string()); }
  const test::TempDir& scratch() const { return scratch_; }
  std::vector<float> params(const std::string& checkpoint) {
    h5::Handle f = h5::open_file(checkpoint);
    return h5::read_dataset<float>(f, "params", checkpoint);
  }

  // seed_cnn's profile measured here (batch 16 a rank) with its links and optimizer made free (a split's
  // smaller optimizer step would win otherwise): a plan from it is data parallelism whatever this machine
  // measures, and a re-plan, which measures the links and the layers, may move away from it.
  std::string free_links_profile() {
    const std::string profile = scratch_ / "free_links.profile";
    const auto saved = run(kMpirun + " -np 2 " + kTrain +
                           train_args("--strategy auto --plan-only --threads 1 --batch-size 16 --save-profile " + profile));
    EXPECT_EQ(saved.exit_code, 0) << saved.err;
    std::ifstream in(profile);
    std::string text;
    for (std::string line; std::getline(in, line);) {
      const std::string key = line.substr(0, line.find(' '));
      // The links' timings by size go: without them a link is its line. So do stage 3's gathers' costs beyond
      // the link.
      if (key.ends_with("_ring_steps") || key.ends_with("_messages") || key == "gather_extra_s") continue;
      text += (key == "within_node" || key == "between_nodes" ? key + " 0 1e15"
               : key == "optimizer_s_per_param"             ? key + " 0"
                                                            : line) +
              "\n";
    }
    in.close();
    std::ofstream(profile) << text;
    return profile;
  }

  static test::TempDir* dir_;
  test::TempDir scratch_;
};
inline test::TempDir* DdlTrain::dir_ = nullptr;

// One line on stderr naming the problem, exit code 2, quickly.
inline void expect_clean_error(const test::ProcessResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(test::count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 20.0);
}

inline double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = a.size() == b.size() ? 0.0 : 1e30;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

// Every rank prints the one line, and the job ends with a non-zero code.
inline void expect_every_rank_refuses(const test::ProcessResult& r, int ranks, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_NE(r.err.find("ddl_train: error (rank " + std::to_string(rank) + "): "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 30.0);
}

// --precision bf16; on a CPU without AVX512-BF16 or AMX, the one line that refuses it.
inline bool bf16_refused(const test::ProcessResult& r) {
  if (cpu_computes_bf16()) return false;
  expect_clean_error(r, "--precision bf16: this CPU has neither AVX512-BF16 nor AMX");
  return true;
}

}  // namespace ddl
