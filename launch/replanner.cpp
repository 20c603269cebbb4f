#include "launch/replanner.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "core/plan/recalibrate.hpp"
#include "launch/plan_profile.hpp"

namespace ddl {

bool worth_moving(const Layout& current, const Prediction& now, const Plan& next) {
  return next.layout.describe() != current.describe() && next.prediction.step_s <= (1 - kSwitchGain) * now.step_s;
}

Replanner::Replanner(TrainOptions given, Profile profile, Cluster cluster, double memory_limit_bytes,
                     double images_bytes, Layout layout,
                     std::function<void(Link&, unsigned long long)> measured_link_fault)
    : given_(std::move(given)),
      profile_(std::move(profile)),
      cluster_(cluster),
      memory_limit_bytes_(memory_limit_bytes),
      images_bytes_(images_bytes),
      layout_(std::move(layout)),
      given_within_(profile_.within_node),
      given_between_(profile_.between_nodes),
      measured_link_fault_(std::move(measured_link_fault)) {}

void Replanner::begin_measuring(const Profiler& profiler, unsigned long long step) {
  previous_totals_.clear();
  for (const auto& e : profiler.entries()) previous_totals_.push_back(e.forward_s + e.backward_s);
  previous_step_ = step;
  step_seconds_ = 0;
  steps_timed_ = 0;
  measuring_ = true;
}

void Replanner::step_took(double seconds) {
  step_seconds_ += seconds;
  ++steps_timed_;
}

bool Replanner::due(unsigned long long steps_done) const {
  return measuring_ && given_.replan_every > 0 &&
         steps_done >= previous_step_ + static_cast<unsigned long long>(given_.replan_every);
}

std::optional<Switch> Replanner::replan(const Communicator& world, const Profiler& profiler, std::size_t first_layer,
                                        unsigned long long step) {
  if (!measuring_ || steps_timed_ == 0 || step <= previous_step_) return std::nullopt;  // alike on every rank
  // Each layer's seconds a step since the last re-plan, and the step's, on the rank that ran them slowest.
  const auto& entries = profiler.entries();
  previous_totals_.resize(entries.size(), 0.0);
  const double steps = static_cast<double>(step - previous_step_);
  std::vector<double> measured(profile_.layers.size() + 1, 0.0);
  for (std::size_t i = 0; i < entries.size() && first_layer + i < profile_.layers.size(); ++i) {
    const double total = entries[i].forward_s + entries[i].backward_s;
    measured[first_layer + i] = (total - previous_totals_[i]) / steps;
    previous_totals_[i] = total;
  }
  measured.back() = step_seconds_ / static_cast<double>(steps_timed_);
  world.allreduce_max(measured);
  const double measured_step = measured.back();
  measured.pop_back();
  previous_step_ = step;
  step_seconds_ = 0;
  steps_timed_ = 0;

  // The layers first, then the links measured again, then whatever the step took beyond both.
  const int global = given_.global_batch_on(cluster_.ranks);
  const Prediction before = predict(profile_, cluster_, layout_, global);
  profile_ = recalibrated(profile_, before, measured);
  const MeasuredLinks links = measure_links(given_, world, kProbeBytesWhileTraining);
  profile_.within_node = links.within_measured ? links.within.extended_by(given_within_) : given_within_;
  profile_.between_nodes = links.between_measured ? links.between.extended_by(given_between_) : given_between_;
  profile_ = with_links_calibrated(profile_, predict(profile_, cluster_, layout_, global), measured_step);
  if (measured_link_fault_) {
    measured_link_fault_(profile_.within_node, step);
    measured_link_fault_(profile_.between_nodes, step);
  }

  const Prediction now = predict(profile_, cluster_, layout_, global);
  std::optional<PlanReport> next;
  try {
    next = plan_strategy(given_, profile_, cluster_, memory_limit_bytes_, images_bytes_);
  } catch (const InputError&) {
    return std::nullopt;  // nothing else fits: the current layout does, it runs
  }
  const Prediction& better = next->chosen.prediction;
  if (!worth_moving(layout_, now, next->chosen)) return std::nullopt;

  double layers_now = 0, layers_before = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    layers_now += measured[i];
    layers_before += before.layers[i].seconds;
  }
  char figures[160];
  std::snprintf(figures, sizeof figures, "re-plan after step %llu: steps took %.3f s, their layers %.3f s (%.3f s planned)",
                step, measured_step, layers_now, layers_before);
  char predicted[96];
  std::snprintf(predicted, sizeof predicted, " is predicted %.3f s a step against %.3f s for ", better.step_s, now.step_s);
  std::string reason = std::string(figures) + ", links within a node " + profile_.within_node.describe() +
                       ", between nodes " + profile_.between_nodes.describe() + ": " +
                       next->chosen.layout.describe() + predicted + layout_.describe() + " now";
  layout_ = next->chosen.layout;
  return Switch{std::move(*next), std::move(reason)};
}

}  // namespace ddl
