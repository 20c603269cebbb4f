// Per-epoch figures appended to a file as CSV (header first) or JSON lines (".jsonl" / ".json"), flushed
// after each epoch so a crash loses at most the current one. launch/plot_metrics.py draws them. The first
// record of a resumed run is marked (resumed 1): a restart (launch/elastic_run.sh, a pre-empted job) shows
// where the epochs before it were cut short.
#pragma once

#include <fstream>
#include <string>

namespace ddl {

struct EpochRecord {
  int epoch;
  double train_loss, train_accuracy, val_loss, val_accuracy;
  double epoch_seconds, images_per_second, lr, peak_rss_mb;
  double comm_wait_share, pipeline_wait_share;  // of the epoch's time: all-reduce waits, pipeline idle
  double data_wait_share;  // of the epoch's time the step waited for the loader (the slowest rank's)
  // The measured step against the planner's prediction (--strategy other than manual; 0 otherwise).
  double step_seconds, planned_step_seconds, planned_comm_share;
  int ranks;  // of the job that trained the epoch: a restart on fewer shows here
};

class MetricsLog {
 public:
  // append: keep what a resumed run wrote before.
  MetricsLog(const std::string& path, bool append);
  void write(const EpochRecord& r);

 private:
  std::string path_;
  bool json_;
  bool resumed_;  // until the first record is written
  std::ofstream out_;
};

}  // namespace ddl
