#include "core/layers/softmax_cross_entropy.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace ddl {

LossSums SoftmaxCrossEntropy::forward(Context& ctx, const Tensor& logits, std::span<const std::int32_t> labels) {
  const dims_t d = logits.dims();
  if (d.size() != 2 || logits.desc() != plain_desc(d))
    throw Error("softmax_cross_entropy: expects plain logits [N, K], got " + to_string(d));
  const auto n = static_cast<std::size_t>(d[0]), k = static_cast<std::size_t>(d[1]);
  if (labels.size() != n)
    throw Error("softmax_cross_entropy: " + std::to_string(labels.size()) + " labels for " + std::to_string(n) +
                " rows");
  if (diff_logits_.empty() || diff_logits_.dims() != d) diff_logits_ = Tensor(logits.desc(), ctx.engine());

  LossSums sums;
  sums.count = n;
  const float* z = logits.data();
  float* g = diff_logits_.data();
  for (std::size_t i = 0; i < n; ++i) {
    const float* row = z + i * k;
    float* grow = g + i * k;
    const auto label = labels[i];
    if (label < 0 || static_cast<std::size_t>(label) >= k)
      throw InputError("softmax_cross_entropy: label " + std::to_string(label) + " outside [0, " + std::to_string(k) +
                       ")");
    const std::size_t argmax = std::max_element(row, row + k) - row;
    const float max = row[argmax];
    double sum = 0.0;
    for (std::size_t j = 0; j < k; ++j) {
      grow[j] = std::exp(row[j] - max);
      sum += grow[j];
    }
    sums.loss += std::log(sum) + max - row[label];
    sums.correct += argmax == static_cast<std::size_t>(label);
    const float scale = static_cast<float>(1.0 / (sum * static_cast<double>(n)));
    for (std::size_t j = 0; j < k; ++j) grow[j] *= scale;
    grow[label] -= 1.0f / static_cast<float>(n);
  }
  return sums;
}

const Tensor& SoftmaxCrossEntropy::backward() { return diff_logits_; }

}  // namespace ddl
