// Softmax cross-entropy on plain logits [N, K] and integer labels, computed stably as
//   loss_n = logsumexp(z_n) - z_n[y_n],   d(mean loss)/dz = (softmax(z) - onehot(y)) / N.
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
  LossSums forward(Context& ctx, const Tensor& logits, std::span<const std::int32_t> labels);
  // Gradient of the batch-mean loss with respect to the logits of the last forward.
  const Tensor& backward();

 private:
  Tensor diff_logits_;
};

}  // namespace ddl
