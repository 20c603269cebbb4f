// Ends the process when one wait for other ranks lasts longer than a timeout. MPI sets no deadline on a
// receive or a collective: a peer that stopped, or whose network link was cut, leaves the others waiting
// silently (Open MPI's own keepalive took 490 s to notice a cut link in a test). A watcher thread sees
// the wait's age; past its limit (WaitLimits: fixed, or learned from the job's own waits and steps) the
// rank prints which operation it waited in and for which ranks, and exits, and mpirun then ends the rest
// of the job. The watcher never calls MPI itself: with MPI_THREAD_SERIALIZED only the thread inside the
// wait may.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/wait_limits.hpp"

namespace ddl {

class HangDetector {
 public:
  // who: how the messages name this process ("rank 3"). stop_signal, when given, holds the signal that
  // asked this process to stop (0: none): a wait that times out after one is the job being ended (mpirun
  // ends the others when one rank fails), not a peer's fault, and is said so, without an error.
  HangDetector(const WaitLimits& limits, std::string who, const std::atomic<int>* stop_signal = nullptr);
  ~HangDetector();
  HangDetector(const HangDetector&) = delete;
  HangDetector& operator=(const HangDetector&) = delete;

  // While alive, this process is waiting in `what` (naming the operation and the peers). Waits may nest
  // (a ring step inside an all-reduce) and come from two threads (the bucket thread): the newest is the
  // one timed and named, as the most precise.
  class Wait {
   public:
    Wait() = default;
    Wait(HangDetector* detector, std::uint64_t id) : detector_(detector), id_(id) {}
    Wait(Wait&& other) noexcept : detector_(other.detector_), id_(other.id_) { other.detector_ = nullptr; }
    Wait& operator=(Wait&&) = delete;
    ~Wait() {
      if (detector_) detector_->end(id_);
    }

   private:
    HangDetector* detector_ = nullptr;
    std::uint64_t id_ = 0;
  };
  // `late`, when given, is asked only when the wait has timed out, on the watcher thread, which ranks
  // have not come ("rank 3 has not arrived"): a collective alone cannot say who is missing.
  using LateRanks = std::function<std::string()>;
  [[nodiscard]] Wait waiting(const std::string& what, LateRanks late = {});

  // What the job does now ("training", "evaluation", "checkpoint"): waits are timed per phase, since
  // the same operation may take much longer in one than in another.
  void set_phase(const std::string& phase);
  // Called after every training step: the time since the previous call is one step's.
  void step_done();
  // The job moves to another layout: its set-up and first step are start-up again (WaitLimits).
  void starting_again();

 private:
  void end(std::uint64_t id);
  void watch();

  using clock = std::chrono::steady_clock;
  std::string who_;
  WaitLimits limits_;
  const std::atomic<int>* stop_signal_;
  std::string phase_ = "start-up";
  clock::time_point last_step_ = clock::now();
  std::mutex mutex_;
  std::condition_variable cv_;
  struct Open {
    std::uint64_t id;
    std::string what, kind;
    clock::time_point since;
    LateRanks late;
  };
  std::vector<Open> open_;
  std::uint64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace ddl
