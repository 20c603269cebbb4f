// Softmax cross-entropy on plain logits [N, K] and integer labels, computed stably as
//   loss_n = logsumexp(z_n) - sum_j q_nj z_nj,   d(mean loss)/dz = (softmax(z) - q) / N,
// with targets q = (1 - e) onehot(y) + e / K: label smoothing e (Szegedy et al. 2016; PyTorch's
// CrossEntropyLoss(label_smoothing=e)), 0 for plain one-hot targets.
// Forward also counts correct top-1 predictions, so one pass yields both training metrics.
#pragma once

#include <cstdint>
#include <span>

#include "core/layers/layer.hpp"

namespace ddl {

struct LossSums {
  double loss = 0.0;        // summed over the batch
  std::size_t correct = 0;  // top-1 hits
  std::size_t count = 0;
};

class SoftmaxCrossEntropy {
 public:
  // Throws InputError where e is not in [0, 1).
  explicit SoftmaxCrossEntropy(float label_smoothing = 0.0f);
  LossSums forward(Context& ctx, const Tensor& logits, std::span<const std::int32_t> labels);
  // Gradient of the batch-mean loss with respect to the logits of the last forward.
  const Tensor& backward();

 private:
  float smoothing_;
  Tensor diff_logits_;
};

}  // namespace ddl
