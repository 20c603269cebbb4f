#include "comm/hang_detector.hpp"

#include <cstdio>
#include <cstdlib>

namespace ddl {

HangDetector::HangDetector(double timeout_seconds, std::string who) : timeout_(timeout_seconds), who_(std::move(who)) {
  if (timeout_ > 0) watcher_ = std::thread([this] { watch(); });
}

HangDetector::~HangDetector() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

HangDetector::Wait HangDetector::waiting(const std::string& what) {
  if (timeout_ <= 0) return Wait();
  std::lock_guard lock(mutex_);
  open_.push_back({++next_id_, what, clock::now()});
  return Wait(this, next_id_);
}

void HangDetector::end(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  std::erase_if(open_, [id](const Open& o) { return o.id == id; });
}

void HangDetector::watch() {
  std::unique_lock lock(mutex_);
  const auto tick = std::chrono::milliseconds(100);
  while (!cv_.wait_for(lock, tick, [this] { return stopping_; })) {
    if (open_.empty()) continue;
    const Open& newest = open_.back();
    const double waited = std::chrono::duration<double>(clock::now() - newest.since).count();
    if (waited < timeout_) continue;
    std::fprintf(stderr, "ddl_train: error (%s): no progress for %.0f s while %s (--timeout %g); stopping the job\n",
                 who_.c_str(), waited, newest.what.c_str(), timeout_);
    std::fflush(stderr);
    std::_Exit(3);
  }
}

}  // namespace ddl
