// How long one wait for other ranks may last before the hang detector stops the job. Either a fixed
// number of seconds (--timeout S), or learned from this job (--timeout auto, the default): a fixed limit
// of five minutes had a whole allocation sit idle that long after a rank died, and any fixed number is
// either too long for a job whose steps take milliseconds or too short for one whose steps take minutes.
//
// Automatic: each kind of wait (the phase it happens in and what it waits for, e.g. "training: receiving
// a ring all-reduce step from rank 3") is allowed a generous start-up limit until it has completed a few
// times (building primitives, the first evaluation, the first checkpoint are slow), then the larger of
// a floor, `kFactor` x the slowest completed wait of that kind, and `kFactor` x the slowest training step
// after the first ones. A stopped peer is then named within the floor on a job of fast steps, while a job
// whose steps take 20 s gets at least 200 s.
//
// Fixed: every wait gets --timeout, but for those while the job starts (set-up, measuring a pipeline's
// stages, building the first step's primitives; the same again after a move to another layout) and while
// a checkpoint is written (the other ranks wait for the writers: seconds for a large model), which get at
// least the start-up limit: a short fixed limit, meant for a job's steady steps, once stopped jobs whose
// ranks were still at work there.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace ddl {

class WaitLimits {
 public:
  static constexpr double kStartupSeconds = 600.0;
  static constexpr double kFloorSeconds = 30.0;
  static constexpr double kFactor = 10.0;
  static constexpr int kLearningWaits = 2;  // completions of a kind (or steps) not yet taken as typical
  // The phase (HangDetector::set_phase) at the start of a kind of wait while checkpoints are written.
  static constexpr const char* kCheckpointPhase = "checkpoint: ";

  // fixed_seconds: a fixed limit for every wait (0: none); nullopt: automatic.
  explicit WaitLimits(std::optional<double> fixed_seconds) : fixed_(fixed_seconds) {}

  // Seconds a wait of `kind` may last; 0: no limit.
  double limit(const std::string& kind) const;
  // How the limit of `kind` was set, for the message that stops the job ("--timeout 5", ...).
  std::string explain(const std::string& kind) const;
  void waited(const std::string& kind, double seconds);
  // A training step ended: the job has started.
  void step_took(double seconds);
  // The job starts again (a move to another layout): until the next step, waits get the start-up limit.
  void starting() { starting_ = true; }

 private:
  struct Seen {
    int count = 0;
    double slowest = 0.0;  // over the completions after the first kLearningWaits
  };
  // Whether a fixed limit gives way to the start-up limit for this kind of wait.
  bool slow_by_nature(const std::string& kind) const;
  // Records `seconds` as the count-th sample: the first kLearningWaits are start-up.
  static void record(Seen& seen, double seconds);

  std::optional<double> fixed_;
  bool starting_ = true;
  std::map<std::string, Seen> waits_;
  Seen steps_;
};

}  // namespace ddl
