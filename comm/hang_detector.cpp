#include "comm/hang_detector.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace ddl {

HangDetector::HangDetector(const WaitLimits& limits, std::string who, const std::atomic<int>* stop_signal)
    : who_(std::move(who)), limits_(limits), stop_signal_(stop_signal) {
  watcher_ = std::thread([this] { watch(); });
}

HangDetector::~HangDetector() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  watcher_.join();
}

HangDetector::Wait HangDetector::waiting(const std::string& what, LateRanks late) {
  std::lock_guard lock(mutex_);
  open_.push_back({++next_id_, what, phase_ + ": " + what, clock::now(), std::move(late)});
  return Wait(this, next_id_);
}

void HangDetector::end(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(open_.begin(), open_.end(), [id](const Open& o) { return o.id == id; });
  if (it == open_.end()) return;
  limits_.waited(it->kind, std::chrono::duration<double>(clock::now() - it->since).count());
  open_.erase(it);
}

void HangDetector::set_phase(const std::string& phase) {
  std::lock_guard lock(mutex_);
  phase_ = phase;
}

void HangDetector::step_done() {
  std::lock_guard lock(mutex_);
  const auto now = clock::now();
  limits_.step_took(std::chrono::duration<double>(now - last_step_).count());
  last_step_ = now;
}

void HangDetector::starting_again() {
  std::lock_guard lock(mutex_);
  limits_.starting();
}

void HangDetector::watch() {
  std::unique_lock lock(mutex_);
  const auto tick = std::chrono::milliseconds(100);
  auto last_tick = clock::now();
  while (!cv_.wait_for(lock, tick, [this] { return stopping_; })) {
    // A tick that came late means this process was not running (SIGSTOP, a paused VM): its peers did not
    // keep it waiting then, so that time is not counted against them. The bar sits below the limits jobs
    // use (30 s at least with --timeout auto; the fault tests use 2 s): a peer that times out on a stopped
    // rank ends the job after its limit or less (its wait may have begun before the stop), and the rank,
    // woken to be ended, must not count that pause as a wait of its own and blame the peer before mpirun's
    // SIGTERM arrives. A thread merely scheduled late (a loaded node) is late by milliseconds, and a late
    // tick still counts its own 100 ms, so lateness taken for a pause only delays an error.
    const auto now = clock::now();
    if (now - last_tick > std::chrono::milliseconds(500)) {
      const auto paused = now - last_tick - tick;
      for (Open& o : open_) o.since = std::min(o.since + paused, now);
      last_step_ = std::min(last_step_ + paused, now);  // nor does the step that the pause fell into
    }
    last_tick = now;
    if (open_.empty()) continue;
    const Open& newest = open_.back();
    const double waited = std::chrono::duration<double>(now - newest.since).count();
    const double limit = limits_.limit(newest.kind);
    if (limit <= 0 || waited < limit) continue;
    if (const int signal = stop_signal_ ? stop_signal_->load() : 0; signal != 0) {
      std::fprintf(stderr, "ddl_train (%s): stopped by signal %d while %s\n", who_.c_str(), signal,
                   newest.what.c_str());
      std::fflush(stderr);
      std::_Exit(128 + signal);
    }
    const std::string late = newest.late ? newest.late() : "";
    const std::string what = late.empty() ? newest.what : newest.what + ", " + late;
    std::fprintf(stderr, "ddl_train: error (%s): no progress for %.0f s while %s (%s); stopping the job\n",
                 who_.c_str(), waited, what.c_str(), limits_.explain(newest.kind).c_str());
    std::fflush(stderr);
    std::_Exit(3);
  }
}

}  // namespace ddl
