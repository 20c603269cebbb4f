// MLPerf Training's log: one line an event, ":::MLLOG " and a JSON object with the namespace, the time in
// milliseconds since the Unix epoch, the event type (INTERVAL_START, INTERVAL_END or POINT_IN_TIME), the key,
// the value and metadata. What a time-to-accuracy run reports: when set-up and the run began and ended,
// each epoch and evaluation, each evaluation's accuracy, and the submission's keys (benchmark, global batch,
// optimizer and its schedule). docs/training.md says which keys ddl writes.
#pragma once

#include <chrono>
#include <fstream>
#include <string>

namespace ddl {

class MlperfLog {
 public:
  using Clock = std::chrono::system_clock;
  // Appends to `path` (a resumed run goes on in the same file); throws InputError naming it where it cannot.
  explicit MlperfLog(const std::string& path);
  // `value` and `metadata` are JSON already: a number, a quoted string ("\"lars\""), or an object's members
  // without braces ("\"epoch_num\": 4").
  void point(const std::string& key, const std::string& value, const std::string& metadata = "");
  void start(const std::string& key, const std::string& metadata = "", Clock::time_point when = Clock::now());
  void stop(const std::string& key, const std::string& metadata = "");

 private:
  void line(const char* type, const std::string& key, const std::string& value, const std::string& metadata,
            Clock::time_point when);
  std::string path_;
  std::ofstream out_;
};

}  // namespace ddl
