#include "launch/stop_signals.hpp"

#include <pthread.h>

#include <csignal>

#include "core/error.hpp"

namespace ddl {

namespace {

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

bool ignored(int signal) {
  struct sigaction now {};
  return sigaction(signal, nullptr, &now) == 0 && now.sa_handler == SIG_IGN;
}

}  // namespace

StopSignals::StopSignals() : int_ignored_(ignored(SIGINT)), term_ignored_(ignored(SIGTERM)) {
  const sigset_t set = stop_set();
  if (const int e = pthread_sigmask(SIG_BLOCK, &set, nullptr); e != 0)
    throw Error("cannot block SIGINT and SIGTERM (error " + std::to_string(e) + ")");
  waiter_ = std::thread([this] { wait(); });
}

StopSignals::~StopSignals() {
  stopping_.store(true);
  pthread_kill(waiter_.native_handle(), SIGTERM);  // wakes the waiter, which now only returns
  waiter_.join();
}

void StopSignals::wait() {
  const sigset_t set = stop_set();
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;
    if (stopping_.load()) return;
    if (armed_.load()) {
      received_.store(signal);
      continue;
    }
    if (signal == SIGINT ? int_ignored_ : term_ignored_) continue;
    // Not training yet: end the process by the signal's default action, from this thread, the one
    // thread where it is unblocked.
    std::signal(signal, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signal);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    raise(signal);
  }
}

}  // namespace ddl
