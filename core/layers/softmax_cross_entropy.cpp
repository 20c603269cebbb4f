#include "core/layers/softmax_cross_entropy.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace ddl {

SoftmaxCrossEntropy::SoftmaxCrossEntropy(float label_smoothing) : smoothing_(label_smoothing) {
  if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f))
    throw InputError("label smoothing " + std::to_string(label_smoothing) + " is not in [0, 1)");
}

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
    double sum = 0.0, row_sum = 0.0;
    for (std::size_t j = 0; j < k; ++j) {
      grow[j] = std::exp(row[j] - max);
      sum += grow[j];
      row_sum += row[j];
    }
    const double spread = smoothing_ / static_cast<double>(k);  // every class's share of the smoothing
    sums.loss += std::log(sum) + max - (1.0 - smoothing_) * row[label] - spread * row_sum;
    sums.correct += argmax == static_cast<std::size_t>(label);
    const float scale = static_cast<float>(1.0 / (sum * static_cast<double>(n)));
    const auto off = static_cast<float>(spread / static_cast<double>(n));
    for (std::size_t j = 0; j < k; ++j) grow[j] = grow[j] * scale - off;
    grow[label] -= (1.0f - smoothing_) / static_cast<float>(n);
  }
  return sums;
}

const Tensor& SoftmaxCrossEntropy::backward() { return diff_logits_; }

}  // namespace ddl
