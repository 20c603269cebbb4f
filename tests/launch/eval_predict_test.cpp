// ddl_eval and ddl_predict on a checkpoint of ddl_train: eval gives training's validation figures on any
// rank count, predict agrees with eval, and both refuse bad input in one line.
#include <cstdio>
#include <sstream>

#include "tests/launch/process_test_fixture.hpp"

namespace ddl {
namespace {

// The text after `key` in `text`, up to the next blank ("" when absent).
std::string value_after(const std::string& text, const std::string& key) {
  const auto at = text.find(key);
  if (at == std::string::npos) return "";
  const auto begin = at + key.size(), end = text.find_first_of(" \n", begin);
  return text.substr(begin, end - begin);
}

TEST_F(DdlTrain, EvalGivesTrainingsValidationFiguresOnAnyRankCount) {
  const std::string ckpt = scratch_ / "ckpt";
  const auto t = run(kTrain + train_args("--epochs 1 --steps-per-epoch 20 --threads 1 --normalize meanstd "
                                         "--checkpoint-dir " + ckpt));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::string val_acc = value_after(t.out, "val loss " + value_after(t.out, "val loss ") + " acc ");
  ASSERT_FALSE(val_acc.empty()) << t.out;
  const std::string json = scratch_ / "eval.json", csv = scratch_ / "eval.csv";
  const auto one = run(kEval + " --threads 1 --checkpoint " + ckpt + "/last.h5 --data " + (*dir_ / "val.h5") +
                       " --output " + json);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(value_after(one.out, "loss "), value_after(t.out, "val loss ")) << one.out << t.out;
  EXPECT_EQ(value_after(one.out, "top-1 accuracy "), val_acc) << one.out << t.out;
  const std::string images = std::to_string(kValImages) + " images";
  EXPECT_NE(one.out.find("data " + (*dir_ / "val.h5") + ": " + images + " (1 rank)"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("airplane"), std::string::npos) << one.out;
  const double top5 = std::stod(value_after(one.out, "top-5 accuracy "));
  EXPECT_GE(top5, std::stod(val_acc));
  EXPECT_LE(top5, 1.0);
  // The confusion matrix in the JSON file: its counts sum to the images, its diagonal to the correct ones.
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto key = text.find("\"confusion\": ");
  ASSERT_NE(key, std::string::npos) << text;
  const auto matrix = text.substr(key + 13);
  double total = 0, diagonal = 0;
  std::size_t row = 0, column = 0;
  for (std::size_t i = 0; i < matrix.size(); ++i) {
    if (matrix[i] == '[' && i > 0) column = 0;
    if (std::isdigit(static_cast<unsigned char>(matrix[i]))) {
      std::size_t used = 0;
      const double v = std::stod(matrix.substr(i), &used);
      total += v;
      if (row == column) diagonal += v;
      ++column;
      i += used - 1;
    }
    if (matrix[i] == ']' && i + 1 < matrix.size() && matrix[i + 1] == ',') ++row;
  }
  EXPECT_EQ(total, static_cast<double>(kValImages)) << text;
  EXPECT_NEAR(diagonal / static_cast<double>(kValImages), std::stod(val_acc), 1e-4) << text;
  // Two ranks split the images and sum the same counts.
  const auto two = run(kMpirun + " -np 2 " + kEval + " --threads 1 --checkpoint " + ckpt + "/last.h5 --data " +
                       (*dir_ / "val.h5") + " --output " + csv);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.out.find(images + " (2 ranks)"), std::string::npos) << two.out;
  EXPECT_EQ(value_after(two.out, "top-1 accuracy "), val_acc) << two.out;
  EXPECT_EQ(value_after(two.out, "loss "), value_after(t.out, "val loss ")) << two.out;
  std::ifstream csv_in(csv);
  std::string header, all;
  std::getline(csv_in, header);
  std::getline(csv_in, all);
  EXPECT_EQ(header.substr(0, 37), "class,name,images,accuracy,loss,top5,") << header;
  EXPECT_TRUE(all.starts_with("all,," + std::to_string(kValImages) + ",")) << all;
}

TEST_F(DdlTrain, PredictAgreesWithEvalOnTheSameImages) {
  // Two images of each class, as files (ddl_predict) and as an imported dataset (ddl_eval).
  const std::string images = scratch_ / "images";
  for (const auto& cls : std::filesystem::directory_iterator(*dir_ / "cifar10_sample")) {
    std::vector<std::filesystem::path> files;
    for (const auto& f : std::filesystem::directory_iterator(cls.path())) files.push_back(f.path());
    std::sort(files.begin(), files.end());
    std::filesystem::create_directories(images + "/" + cls.path().filename().string());
    for (std::size_t i = 0; i < 2; ++i)
      std::filesystem::copy_file(files[i], images + "/" + cls.path().filename().string() + "/" + files[i].filename().string());
  }
  ASSERT_EQ(run(kData + " import --from " + images + " --output " + (scratch_ / "twenty.h5")).exit_code, 0);
  const std::string ckpt = scratch_ / "ckpt";
  ASSERT_EQ(run(kTrain + train_args("--epochs 1 --steps-per-epoch 30 --threads 1 --checkpoint-dir " + ckpt)).exit_code, 0);
  const auto eval = run(kEval + " --checkpoint " + ckpt + "/last.h5 --data " + (scratch_ / "twenty.h5"));
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const auto predict = run(kPredict + " --checkpoint " + ckpt + "/last.h5 --top 3 " + images);
  ASSERT_EQ(predict.exit_code, 0) << predict.err;
  ASSERT_EQ(test::count_lines(predict.out), 20u) << predict.out;
  std::istringstream lines(predict.out);
  int right = 0;
  for (std::string line; std::getline(lines, line);) {
    // ".../images/cat/0001.jpg: cat 0.4123, dog 0.2001, frog 0.1000"
    const auto colon = line.find(": ");
    const std::string truth = std::filesystem::path(line.substr(0, colon)).parent_path().filename().string();
    std::istringstream rest(line.substr(colon + 2));
    std::string first, name;
    double p1 = 0, p2 = 0, p3 = 0;
    char comma = 0;
    rest >> first >> p1 >> comma >> name >> p2 >> comma >> name >> p3;
    EXPECT_GE(p1, p2) << line;
    EXPECT_GE(p2, p3) << line;
    EXPECT_LE(p1 + p2 + p3, 1.0001) << line;
    right += first == truth;
  }
  char expected[16];
  std::snprintf(expected, sizeof expected, "%.4f", right / 20.0);
  EXPECT_EQ(value_after(eval.out, "top-1 accuracy "), expected) << eval.out << predict.out;
  const auto csv = run(kPredict + " --checkpoint " + ckpt + "/last.h5 --csv --top 2 " + images + "/cat");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out.substr(0, csv.out.find('\n')), "image,class_1,probability_1,class_2,probability_2");
  EXPECT_EQ(test::count_lines(csv.out), 3u) << csv.out;
}

TEST_F(DdlTrain, EvalAndPredictRefuseBadInputInOneLine) {
  const std::string ckpt = scratch_ / "ckpt", last = ckpt + "/last.h5", val = *dir_ / "sample_val.h5";
  ASSERT_EQ(run(kTrain + train_args("--epochs 1 --steps-per-epoch 2 --checkpoint-dir " + ckpt)).exit_code, 0);
  expect_clean_error(run(kEval + " --checkpoint " + val + " --data " + val), val + ": not a ddl_train checkpoint");
  expect_clean_error(run(kEval + " --checkpoint " + (scratch_ / "none.h5") + " --data " + val), "none.h5: no such file");
  expect_clean_error(run(kEval + " --checkpoint " + last + " --data " + (*dir_ / "cifar10_sample")),
                     "is a folder: import its images first");
  expect_clean_error(run(kEval + " --checkpoint " + last + " --data " + val + " --output " + (scratch_ / "x.txt")),
                     "give a .csv or .json file");
  expect_clean_error(run(kEval + " --checkpoint " + last), "--data is required");
  // Under mpirun: one ddl line (the first failing rank's) beside mpirun's own notice, exit 2 on every rank.
  const auto ranks = run(kMpirun + " -np 2 " + kEval + " --checkpoint " + val + " --data " + val);
  EXPECT_NE(ranks.exit_code, 0);
  EXPECT_NE(ranks.err.find("ddl_eval: error (rank 0): " + val + ": not a ddl_train checkpoint"), std::string::npos)
      << ranks.err;
  EXPECT_EQ(ranks.err.find("(rank 1)"), std::string::npos) << ranks.err;
  EXPECT_NE(ranks.err.find("Exit code:    2"), std::string::npos) << ranks.err;
  // Another dataset's classes: the first two classes of the sample, renamed.
  const std::string other = scratch_ / "other";
  std::filesystem::create_directories(other);
  for (const std::string cls : {"airplane", "automobile"})
    std::filesystem::copy(*dir_ / ("cifar10_sample/" + cls), other + "/x" + cls);
  ASSERT_EQ(run(kData + " import --from " + other + " --output " + (scratch_ / "other.h5")).exit_code, 0);
  expect_clean_error(run(kEval + " --checkpoint " + last + " --data " + (scratch_ / "other.h5")),
                     "class 0 is 'xairplane', the checkpoint's model was trained with 'airplane' there");
  std::filesystem::create_directories(scratch_ / "empty");
  expect_clean_error(run(kPredict + " --checkpoint " + last + " " + (scratch_ / "empty")),
                     "no .jpg, .jpeg or .png images in this folder");
  std::ofstream(scratch_ / "broken.jpg") << "not a jpeg";
  expect_clean_error(run(kPredict + " --checkpoint " + last + " " + (scratch_ / "broken.jpg")), "broken.jpg");
  expect_clean_error(run(kPredict + " --checkpoint " + last), "give one or more images or folders of images");
}


}  // namespace
}  // namespace ddl
