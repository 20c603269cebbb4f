#include "core/train/trainer.hpp"

#include <chrono>
#include <cmath>

#include "core/error.hpp"

namespace ddl {

Trainer::Trainer(Context& ctx, Model& model, Optimizer& optimizer, const LrSchedule& schedule, ReplicaGroup& group)
    : ctx_(ctx), model_(model), optimizer_(optimizer), schedule_(schedule), group_(group) {
  model_.on_gradients_ready = [this](std::size_t offset, std::size_t count) {
    group_.gradients_ready(model_.grads(), offset, count);
  };
}

Trainer::~Trainer() { model_.on_gradients_ready = nullptr; }

PassMetrics Trainer::reduce(double loss_sum, double correct, double images, double seconds) {
  double sums[3] = {loss_sum, correct, images};
  group_.sum(sums);
  PassMetrics m;
  m.images = sums[2];
  m.loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
  m.accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
  m.seconds = seconds;
  return m;
}

PassMetrics Trainer::train_epoch(BatchLoader& loader, std::size_t epoch, std::size_t steps,
                                 const std::function<void(const StepProgress&)>& progress) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  double loss_sum = 0.0, correct = 0.0, images = 0.0;
  std::size_t step = 0;
  while (const Batch* batch = loader.next()) {
    last_lr_ = schedule_.at(static_cast<double>(epoch) + static_cast<double>(step) / static_cast<double>(steps));
    const Tensor& logits = model_.forward(ctx_, batch->images, Mode::train);
    const LossSums sums = loss_.forward(ctx_, logits, batch->labels);
    if (!std::isfinite(sums.loss))
      throw Error("training diverged: loss is " + std::to_string(sums.loss) + " at epoch " + std::to_string(epoch + 1) +
                  " step " + std::to_string(step + 1) + " (lower the learning rate?)");
    model_.backward(ctx_, loss_.backward());
    group_.average(model_.grads());
    optimizer_.step(model_.params(), model_.grads(), last_lr_);
    loss_sum += sums.loss;
    correct += static_cast<double>(sums.correct);
    images += static_cast<double>(sums.count);
    ++step;
    if (progress) {
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      progress({step, steps, loss_sum / images, images * group_.size() / s});
    }
  }
  return reduce(loss_sum, correct, images, std::chrono::duration<double>(clock::now() - t0).count());
}

PassMetrics Trainer::evaluate(BatchLoader& loader) {
  const auto t0 = std::chrono::steady_clock::now();
  double loss_sum = 0.0, correct = 0.0, images = 0.0;
  while (const Batch* batch = loader.next()) {
    const LossSums sums = loss_.forward(ctx_, model_.forward(ctx_, batch->images, Mode::infer), batch->labels);
    loss_sum += sums.loss;
    correct += static_cast<double>(sums.correct);
    images += static_cast<double>(sums.count);
  }
  return reduce(loss_sum, correct, images,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace ddl
