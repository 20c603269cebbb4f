#include "launch/tensorboard_log.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "core/crc32c.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;

// tensorflow/core/util/event.proto and summary.proto's field numbers: the few that scalars need.
enum EventField { kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 6 };
enum SummaryField { kValue = 1 };
enum ValueField { kTag = 1, kSimpleValue = 2 };
enum SessionLogField { kStatus = 1 };
constexpr int kSessionStart = 1;
enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

std::uint32_t field_key(int field, WireType type) { return static_cast<std::uint32_t>(field << 3 | type); }

void write_bytes(CodedOutputStream& out, int field, const std::string& bytes) {
  out.WriteTag(field_key(field, kLengthDelimited));
  out.WriteVarint32(static_cast<std::uint32_t>(bytes.size()));
  out.WriteString(bytes);
}

std::string encoded(const std::function<void(CodedOutputStream&)>& write) {
  std::string bytes;
  {
    StringOutputStream stream(&bytes);
    CodedOutputStream out(&stream);
    write(out);
  }  // the stream writes its last bytes when it ends
  return bytes;
}

// An Event: its wall time (seconds since the epoch) and step, then `what`, one field already encoded.
std::string event(std::uint64_t step, const std::string& what) {
  return encoded([&](CodedOutputStream& out) {
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::uint64_t bits;
    std::memcpy(&bits, &now, sizeof bits);
    out.WriteTag(field_key(kWallTime, kFixed64));
    out.WriteLittleEndian64(bits);
    out.WriteTag(field_key(kStep, kVarint));
    out.WriteVarint64(step);
    out.WriteRaw(what.data(), static_cast<int>(what.size()));
  });
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

TensorBoardLog::TensorBoardLog(const std::string& dir, bool resumed, std::uint64_t resumed_at) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string name = "events.out.tfevents.";
  name.append(std::to_string(seconds)).append(".").append(host_name());
  path_ = (std::filesystem::path(dir) / name).string();
  // Two runs started in the same second on one host (a quick restart) keep their own files.
  for (int n = 1; std::filesystem::exists(path_); ++n)
    path_ = (std::filesystem::path(dir) / name).string() + '.' + std::to_string(n);
  out_.open(path_, std::ios::binary);
  if (!out_)
    throw InputError("--tensorboard " + dir + ": cannot write " + path_ + (error ? " (" + error.message() + ")" : ""));
  write_record(event(0, encoded([](CodedOutputStream& out) { write_bytes(out, kFileVersion, "brain.Event:2"); })));
  if (resumed)
    write_record(event(resumed_at, encoded([](CodedOutputStream& out) {
                         write_bytes(out, kSessionLog, encoded([](CodedOutputStream& log) {
                                       log.WriteTag(field_key(kStatus, kVarint));
                                       log.WriteVarint32(kSessionStart);
                                     }));
                       })));
  flush();
}

void TensorBoardLog::scalars(std::uint64_t step, const std::vector<std::pair<std::string, double>>& values) {
  const std::string summary = encoded([&](CodedOutputStream& out) {
    for (const auto& [name, value] : values)
      write_bytes(out, kValue, encoded([&](CodedOutputStream& v) {
                    write_bytes(v, kTag, name);
                    v.WriteTag(field_key(kSimpleValue, kFixed32));
                    const float f = static_cast<float>(value);
                    std::uint32_t bits;
                    std::memcpy(&bits, &f, sizeof bits);
                    v.WriteLittleEndian32(bits);
                  }));
  });
  write_record(event(step, encoded([&](CodedOutputStream& out) { write_bytes(out, kSummary, summary); })));
}

void TensorBoardLog::flush() {
  out_.flush();
  if (!out_) throw Error("writing " + path_ + " failed (disk full?)");
}

void TensorBoardLog::write_record(const std::string& event) {
  char length[8];
  const std::uint64_t n = event.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>(n >> (8 * i) & 0xFF);
  const auto put32 = [&](std::uint32_t v) {
    char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i) & 0xFF);
    out_.write(b, 4);
  };
  out_.write(length, 8);
  put32(masked_crc32c(std::string_view(length, 8)));
  out_.write(event.data(), static_cast<std::streamsize>(event.size()));
  put32(masked_crc32c(event));
}

}  // namespace ddl
