#pragma once

#include <atomic>
#include <thread>

namespace ddl {

// SIGINT and SIGTERM (Slurm's pre-emption), taken by one thread of ddl_train's own that does nothing else.
// No handler may run on a thread that computes: some of oneDNN's JIT gemm kernels (every release before
// the fix of oneDNN issue #4845 in March 2026, Debian 12's and 13's among them) hold a heap address in rsp,
// and the kernel writes a signal's frame below rsp, into the heap (it corrupted ddl_train's heap in about 1
// of 30 stops on a loaded machine). So
// the constructor blocks both signals in the calling thread, first thing in main, before MPI or oneDNN
// starts a thread; every thread started later inherits that, and only the waiter takes them.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Until armed (set-up), a signal does what it would have done without this class: it ends the process,
  // or nothing where it was ignored (bash starts a background job with SIGINT ignored). Once armed
  // (training), it is recorded for the ranks to stop together after a step.
  void arm() { armed_.store(true); }
  // The signal recorded since arm(), 0 while none came.
  const std::atomic<int>& received() const { return received_; }

 private:
  void wait();

  bool int_ignored_ = false, term_ignored_ = false;  // at construction
  std::atomic<int> received_{0};
  std::atomic<bool> armed_{false};
  std::atomic<bool> stopping_{false};
  std::thread waiter_;
};

}  // namespace ddl
