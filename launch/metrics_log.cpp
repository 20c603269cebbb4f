#include "launch/metrics_log.hpp"

#include <cstdio>
#include <filesystem>

#include "core/error.hpp"

namespace ddl {

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path), resumed_(append) {
  const std::string ext = std::filesystem::path(path).extension().string();
  json_ = ext == ".jsonl" || ext == ".json";
  const bool fresh = !append || !std::filesystem::exists(path) || std::filesystem::file_size(path) == 0;
  out_.open(path, fresh ? std::ios::trunc : std::ios::app);
  if (!out_) throw InputError("--metrics: cannot write " + path);
  if (fresh && !json_)
    out_ << "epoch,train_loss,train_accuracy,val_loss,val_accuracy,epoch_seconds,images_per_second,lr,peak_rss_mb,comm_"
            "wait_share,"
            "pipeline_wait_share,data_wait_share,step_seconds,planned_step_seconds,planned_comm_share,ranks,resumed\n"
         << std::flush;
}

void MetricsLog::write(const EpochRecord& r) {
  char line[512];
  if (json_)
    std::snprintf(
        line, sizeof line,
        "{\"epoch\": %d, \"train_loss\": %.6f, \"train_accuracy\": %.6f, \"val_loss\": %.6f, "
        "\"val_accuracy\": %.6f, \"epoch_seconds\": %.3f, \"images_per_second\": %.1f, \"lr\": %.6g, "
        "\"peak_rss_mb\": %.1f, \"comm_wait_share\": %.4f, \"pipeline_wait_share\": %.4f, \"data_wait_share\": %.4f, "
        "\"step_seconds\": %.6f, \"planned_step_seconds\": %.6f, \"planned_comm_share\": %.4f, "
        "\"ranks\": %d, \"resumed\": %d}\n",
        r.epoch, r.train_loss, r.train_accuracy, r.val_loss, r.val_accuracy, r.epoch_seconds, r.images_per_second, r.lr,
        r.peak_rss_mb, r.comm_wait_share, r.pipeline_wait_share, r.data_wait_share, r.step_seconds,
        r.planned_step_seconds, r.planned_comm_share, r.ranks, resumed_ ? 1 : 0);
  else
    std::snprintf(line, sizeof line, "%d,%.6f,%.6f,%.6f,%.6f,%.3f,%.1f,%.6g,%.1f,%.4f,%.4f,%.4f,%.6f,%.6f,%.4f,%d,%d\n",
                  r.epoch, r.train_loss, r.train_accuracy, r.val_loss, r.val_accuracy, r.epoch_seconds,
                  r.images_per_second, r.lr, r.peak_rss_mb, r.comm_wait_share, r.pipeline_wait_share, r.data_wait_share,
                  r.step_seconds, r.planned_step_seconds, r.planned_comm_share, r.ranks, resumed_ ? 1 : 0);
  resumed_ = false;
  out_ << line << std::flush;
  if (!out_) throw Error("cannot write to metrics file " + path_);
}

}  // namespace ddl
