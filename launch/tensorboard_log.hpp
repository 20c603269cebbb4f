// Scalars for TensorBoard (and W&B, which reads its files): an event file in a directory, written by ddl on
// the protobuf library it links for ONNX, without TensorFlow. The file is TFRecord-framed (length, masked
// CRC-32C of the length, a tensorflow.Event, masked CRC-32C of the event); each event holds a wall time, a
// step and a Summary of simple_value scalars. docs/faults-and-observability.md lists the tags ddl writes.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace ddl {

class TensorBoardLog {
 public:
  // A new file events.out.tfevents.<seconds>.<host> in `dir` (made if missing). A resumed run (resumed_at:
  // the step it resumes after) first writes a session start at that step, so that TensorBoard drops what an
  // earlier run wrote past it (steps trained again after the checkpoint) and the curves go on under the same
  // tags. Throws InputError naming the directory where it cannot be written.
  TensorBoardLog(const std::string& dir, bool resumed, std::uint64_t resumed_at);
  void scalars(std::uint64_t step, const std::vector<std::pair<std::string, double>>& values);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace ddl
