#include "launch/mlperf_log.hpp"

#include "core/error.hpp"

namespace ddl {

MlperfLog::MlperfLog(const std::string& path) : path_(path), out_(path, std::ios::app) {
  if (!out_) throw InputError("--mlperf-log " + path + ": cannot write it");
}

void MlperfLog::point(const std::string& key, const std::string& value, const std::string& metadata) {
  line("POINT_IN_TIME", key, value, metadata, Clock::now());
}

void MlperfLog::start(const std::string& key, const std::string& metadata, Clock::time_point when) {
  line("INTERVAL_START", key, "null", metadata, when);
}

void MlperfLog::stop(const std::string& key, const std::string& metadata) {
  line("INTERVAL_END", key, "null", metadata, Clock::now());
}

void MlperfLog::line(const char* type, const std::string& key, const std::string& value, const std::string& metadata,
                     Clock::time_point when) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()).count();
  // The file and line of the logging call, which MLPerf's own logger adds: here the program's name.
  out_ << ":::MLLOG {\"namespace\": \"\", \"time_ms\": " << ms << ", \"event_type\": \"" << type << "\", \"key\": \""
       << key << "\", \"value\": " << value << ", \"metadata\": {\"file\": \"ddl_train\", \"lineno\": 0"
       << (metadata.empty() ? "" : ", ") << metadata << "}}\n";
  out_.flush();  // a run killed mid-way keeps what it logged
  if (!out_) throw Error("writing " + path_ + " failed (disk full?)");
}

}  // namespace ddl
