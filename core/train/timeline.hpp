// What each rank did when, for `ddl_train --timeline`: spans of forward and backward passes (per
// micro-batch), waits for data, for pipeline messages and for the gradient all-reduce, optimizer steps
// and evaluation, written as Chrome trace events (chrome://tracing, Perfetto). Timestamps are wall-clock
// microseconds, so the ranks of one machine (or of clock-synchronised hosts) line up.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddl {

class Timeline {
 public:
  // Keeps at most this many events (about 40 MB); a long run's later steps are then not recorded.
  static constexpr std::size_t kMostEvents = 1'000'000;

  class Span {
   public:
    Span() = default;
    Span(Timeline* timeline, const char* name, int micro) : timeline_(timeline), name_(name), micro_(micro) {
      if (timeline_) start_ = now_us();
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;
    ~Span() {
      if (timeline_) timeline_->add(name_, micro_, start_, now_us() - start_);
    }

   private:
    Timeline* timeline_ = nullptr;
    const char* name_ = "";
    int micro_ = -1;
    std::int64_t start_ = 0;
  };

  // `name` must be a string literal; micro: the micro-batch, or -1.
  static Span span(Timeline* timeline, const char* name, int micro = -1) { return Span(timeline, name, micro); }

  // This process's events as comma-separated Chrome trace objects, under process id `pid` called `label`.
  std::string json_events(int pid, const std::string& label) const;
  std::size_t dropped() const { return dropped_; }

 private:
  struct Event {
    const char* name;
    int micro;
    std::int64_t start_us, duration_us;
  };
  static std::int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  void add(const char* name, int micro, std::int64_t start, std::int64_t duration) {
    if (events_.size() < kMostEvents)
      events_.push_back({name, micro, start, duration});
    else
      ++dropped_;
  }

  std::vector<Event> events_;
  std::size_t dropped_ = 0;
};

}  // namespace ddl
