// ddl_train's TensorBoard event files read back by a reader of the test's own: TFRecord framing, both masked
// CRC-32Cs (computed bit by bit here, not by ddl's table), and the protobuf fields of tensorflow.Event and
// Summary decoded by hand; the figures equal the metrics file's, and a resumed run goes on under the same tags.
#include <cstring>
#include <map>
#include <regex>
#include <sstream>

#include "tests/launch/process_test_fixture.hpp"

namespace ddl {
namespace {

std::uint32_t bitwise_crc32c(const std::string& bytes) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (const unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
std::uint32_t masked(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

std::uint64_t little_endian(const std::string& bytes, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(bytes.at(at + i));
  return v;
}

// One protobuf message's fields: (field number, wire type) to the raw value (varints and fixed widths as
// numbers, length-delimited as bytes).
struct Field {
  int number, type;
  std::uint64_t number_value = 0;
  std::string bytes;
};
std::vector<Field> fields(const std::string& message) {
  std::vector<Field> out;
  std::size_t at = 0;
  const auto varint = [&] {
    std::uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const auto b = static_cast<unsigned char>(message.at(at++));
      v |= std::uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (at < message.size()) {
    const std::uint64_t key = varint();
    Field f{int(key >> 3), int(key & 7)};
    if (f.type == 0) f.number_value = varint();
    if (f.type == 1 || f.type == 5) {
      const int n = f.type == 1 ? 8 : 4;
      f.number_value = little_endian(message, at, n);
      at += n;
    }
    if (f.type == 2) {
      const std::uint64_t n = varint();
      f.bytes = message.substr(at, n);
      at += n;
    }
    EXPECT_TRUE(f.type == 0 || f.type == 1 || f.type == 2 || f.type == 5) << "wire type " << f.type;
    out.push_back(f);
  }
  return out;
}

struct Event {
  std::uint64_t step = 0;
  double wall_time = 0;
  std::string file_version;
  bool session_start = false;
  std::map<std::string, float> scalars;
};

std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> events;
  for (std::size_t at = 0; at < file.size();) {
    const std::uint64_t length = little_endian(file, at, 8);
    EXPECT_EQ(little_endian(file, at + 8, 4), masked(bitwise_crc32c(file.substr(at, 8)))) << "length CRC at " << at;
    const std::string data = file.substr(at + 12, length);
    EXPECT_EQ(little_endian(file, at + 12 + length, 4), masked(bitwise_crc32c(data))) << "data CRC at " << at;
    at += 16 + length;
    Event e;
    for (const Field& f : fields(data)) {
      if (f.number == 1) std::memcpy(&e.wall_time, &f.number_value, 8);
      if (f.number == 2) e.step = f.number_value;
      if (f.number == 3) e.file_version = f.bytes;
      if (f.number == 6)
        for (const Field& s : fields(f.bytes))
          e.session_start = e.session_start || (s.number == 1 && s.number_value == 1);
      if (f.number != 5) continue;
      for (const Field& value : fields(f.bytes)) {  // Summary.value
        std::string tag;
        float simple = NAN;
        for (const Field& v : fields(value.bytes)) {
          if (v.number == 1) tag = v.bytes;
          const auto bits = static_cast<std::uint32_t>(v.number_value);
          if (v.number == 2) std::memcpy(&simple, &bits, 4);
        }
        e.scalars[tag] = simple;
      }
    }
    events.push_back(e);
  }
  return events;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST_F(DdlTrain, TensorBoardEventsHoldTheRunsFiguresAndAResumedRunGoesOnUnderTheSameTags) {
  const std::string board = scratch() / "board", metrics = scratch() / "metrics.csv", ck = scratch() / "ck";
  // 4800 images, batch 2 x 32: 75 steps an epoch, capped at 10.
  const std::string args =
      "--model seed_cnn --steps-per-epoch 10 --batch-size 32 --threads 1 "
      "--tensorboard-every 4 --tensorboard " +
      board + " --checkpoint-dir " + ck;
  const auto r = run(kMpirun + " -np 2 " + kTrain + train_args(args + " --epochs 2 --metrics " + metrics));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto files = event_files(board);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("events.out.tfevents."), std::string::npos);
  const auto events = read_events(files[0]);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.7e9);
  // Per step: every 4 steps and at each epoch's last; each epoch's figures at its last step.
  std::vector<std::uint64_t> loss_steps, epoch_steps;
  std::vector<float> val_accuracy;
  for (const Event& e : events) {
    if (e.scalars.count("train/loss")) {
      loss_steps.push_back(e.step);
      EXPECT_GT(e.scalars.at("train/loss"), 0.5f);
      EXPECT_LT(e.scalars.at("train/loss"), 5.0f);
      EXPECT_GT(e.scalars.at("train/learning_rate"), 0.0f);
    }
    if (e.scalars.count("epoch/val_accuracy")) {
      epoch_steps.push_back(e.step);
      val_accuracy.push_back(e.scalars.at("epoch/val_accuracy"));
      for (const char* tag :
           {"epoch/train_loss", "epoch/train_accuracy", "epoch/val_loss", "epoch/images_per_second",
            "epoch/step_seconds", "epoch/learning_rate", "epoch/peak_memory_mb", "epoch/comm_wait_share"})
        EXPECT_EQ(e.scalars.count(tag), 1u) << tag;
    }
  }
  EXPECT_EQ(loss_steps, (std::vector<std::uint64_t>{4, 8, 10, 14, 18, 20}));
  EXPECT_EQ(epoch_steps, (std::vector<std::uint64_t>{10, 20}));
  // The metrics file's validation accuracy, column by its header.
  std::ifstream in(metrics);
  std::string header, row;
  std::getline(in, header);
  std::size_t column = 0;
  for (std::size_t at = 0; header.substr(at, header.find(',', at) - at) != "val_accuracy";
       at = header.find(',', at) + 1) {
    ASSERT_NE(header.find(',', at), std::string::npos) << header;
    ++column;
  }
  for (std::size_t epoch = 0; std::getline(in, row); ++epoch) {
    std::stringstream cells(row);
    std::string cell;
    for (std::size_t c = 0; c <= column; ++c) std::getline(cells, cell, ',');
    ASSERT_LT(epoch, val_accuracy.size());
    EXPECT_NEAR(val_accuracy[epoch], std::stod(cell), 1e-4) << row;
  }

  // Resumed for a third epoch: a second file that starts a session at step 20 and goes on at step 30.
  const auto again = run(kMpirun + " -np 2 " + kTrain + train_args(args + " --resume auto --epochs 3"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  files = event_files(board);
  ASSERT_EQ(files.size(), 2u);
  const auto resumed = read_events(files[1]);  // a later second, or the same one and a suffix
  ASSERT_GE(resumed.size(), 3u);
  EXPECT_EQ(resumed[0].file_version, "brain.Event:2");
  EXPECT_TRUE(resumed[1].session_start);
  EXPECT_EQ(resumed[1].step, 20u);
  EXPECT_EQ(resumed.back().step, 30u);
  EXPECT_EQ(resumed.back().scalars.count("epoch/val_accuracy"), 1u);
}

// Checked by rank 0 alone, as --metrics: every rank stops quickly, with rank 0's line.
TEST_F(DdlTrain, ATensorBoardFolderThatCannotBeMadeIsNamed) {
  const std::string file = scratch() / "a_file";
  std::ofstream(file) << "x";
  const auto r =
      run(kMpirun + " -np 2 " + kTrain + train_args("--model seed_cnn --epochs 1 --tensorboard " + file + "/board"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("ddl_train: error (rank 0): --tensorboard " + file + "/board: Not a directory"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 20.0);
}

// The reference recipe's parts on the sample: label smoothing, validation every 2 epochs, a target that ends
// the run at the first validation reaching it, and MLPerf's log of it.
TEST_F(DdlTrain, ATargetAccuracyEndsTheRunAndTheMlperfLogTellsIt) {
  const std::string log = scratch() / "mlperf.log";
  const auto r = run(kMpirun + " -np 2 " + kTrain +
                     train_args("--model seed_cnn --epochs 12 --steps-per-epoch 20 --batch-size 32 --threads 1 "
                                "--optimizer lars --lr 1 --lr-schedule poly --warmup-epochs 1 --label-smoothing 0.1 "
                                "--eval-every 2 --target-accuracy 0.2 --checkpoint-dir " +
                                (scratch() / "ck") + " --mlperf-log " + log));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string reached = "reached the target accuracy 0.2000 after epoch ";
  const auto at = r.out.find(reached);
  ASSERT_NE(at, std::string::npos) << r.out;
  const int last = std::stoi(r.out.substr(at + reached.size()));
  EXPECT_EQ(last % 2, 0);
  EXPECT_LT(last, 12);
  EXPECT_EQ(r.out.find("epoch " + std::to_string(last + 1) + "/12"), std::string::npos) << r.out;
  // Validation only every second epoch.
  const auto epoch_line = [&](int epoch) {
    const auto from = r.out.find("epoch " + std::to_string(epoch) + "/12  ");
    return from == std::string::npos ? std::string() : r.out.substr(from, r.out.find('\n', from) - from);
  };
  EXPECT_EQ(epoch_line(1).find("val loss"), std::string::npos) << epoch_line(1);
  EXPECT_NE(epoch_line(2).find("val loss"), std::string::npos) << epoch_line(2);

  // Every line one JSON object of MLPerf's form; the events in their order.
  const std::regex line(
      R"re(:::MLLOG \{"namespace": "", "time_ms": \d{13}, "event_type": "(INTERVAL_START|INTERVAL_END|POINT_IN_TIME)", )re"
      R"re("key": "([a-z_]+)", "value": (null|true|false|-?[0-9.e+-]+|"[^"\\]*"), )re"
      R"re("metadata": \{"file": "ddl_train", "lineno": 0((, "[a-z_]+": ("[a-z]+"|\d+))*)\}\})re");
  std::ifstream in(log);
  std::vector<std::string> keys;
  std::map<std::string, std::string> values, metadata;
  std::vector<std::string> accuracies;
  for (std::string text; std::getline(in, text);) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(text, m, line)) << text;
    keys.push_back(m[2]);
    values[m[2]] = m[3];
    metadata[m[2]] = m[4];
    if (m[2] == "eval_accuracy") accuracies.push_back(m[3]);
  }
  ASSERT_GE(keys.size(), 10u);
  EXPECT_EQ(keys.front(), "init_start");
  EXPECT_EQ(keys.back(), "run_stop");
  EXPECT_EQ(metadata["run_stop"], R"(, "status": "success")");
  const auto index = [&](const std::string& key) { return std::find(keys.begin(), keys.end(), key) - keys.begin(); };
  EXPECT_LT(index("init_stop"), index("run_start"));
  EXPECT_LT(index("run_start"), index("epoch_start"));
  EXPECT_EQ(std::count(keys.begin(), keys.end(), "epoch_start"), last);
  EXPECT_EQ(std::count(keys.begin(), keys.end(), "epoch_stop"), last);
  EXPECT_EQ(static_cast<int>(accuracies.size()), last / 2);
  EXPECT_GE(std::stod(accuracies.back()), 0.2);
  for (std::size_t i = 0; i + 1 < accuracies.size(); ++i) EXPECT_LT(std::stod(accuracies[i]), 0.2);
  EXPECT_EQ(metadata["eval_accuracy"], ", \"epoch_num\": " + std::to_string(last));
  EXPECT_EQ(values["global_batch_size"], "64");
  EXPECT_EQ(values["opt_name"], "\"lars\"");
  EXPECT_EQ(values["lars_opt_base_learning_rate"], "1");
  EXPECT_EQ(values["lars_opt_learning_rate_warmup_epochs"], "1");
  EXPECT_EQ(values["lars_opt_learning_rate_decay_poly_power"], "2");
  EXPECT_EQ(values["lars_opt_learning_rate_decay_steps"], "240");
  EXPECT_EQ(values["train_samples"], "4800");
  EXPECT_EQ(values["eval_samples"], std::to_string(kValImages));
  // Resumed, a run that reached its target has nothing more to train.
  const auto again =
      run(kMpirun + " -np 2 " + kTrain +
          train_args("--model seed_cnn --epochs 12 --steps-per-epoch 20 --batch-size 32 --threads 1 "
                     "--optimizer lars --lr 1 --lr-schedule poly --warmup-epochs 1 --label-smoothing 0.1 "
                     "--eval-every 2 --target-accuracy 0.2 --resume auto --checkpoint-dir " +
                     (scratch() / "ck")));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("nothing to train: "), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("reached the target accuracy 0.2000 already"), std::string::npos) << again.out;
}

TEST_F(DdlTrain, ATargetWithoutValidationImagesIsRefused) {
  expect_clean_error(run(kTrain + " --train " + (*dir_ / "sample.h5") + " --progress never --target-accuracy 0.5"),
                     "--target-accuracy needs validation images (--val or --val-fraction)");
}

}  // namespace
}  // namespace ddl
