// Inverted dropout: in training each element is kept with probability 1 - p and scaled by 1 / (1 - p), so
// inference is the identity. The mask comes from the layer's own generator, seeded from the run's seed and
// saved in checkpoints, so a resumed run draws the same masks.
#pragma once

#include "core/aligned_buffer.hpp"
#include "core/layers/layer.hpp"
#include "core/rng.hpp"

namespace ddl {

class Dropout : public Layer {
 public:
  Dropout(float p, std::uint64_t seed);

  std::string describe() const override;
  float probability() const { return p_; }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  // Its backward reads the mask only.
  bool backward_reads_input() const override { return false; }
  bool backward_reads_output() const override { return false; }
  // Between bf16 layers it scales bf16 elements (the mask stays f32).
  bool takes_bf16() const override { return output_type_ == dt::bf16; }
  std::vector<StateView> state() override;

 private:
  void apply_mask(const Tensor& x, Tensor& y) const;

  float p_;
  Rng rng_;
  Rng::State rng_state_{};  // state() exposes this copy; forward keeps it in step with rng_
  Mode mode_ = Mode::train;
  bool need_diff_src_ = false;
  AlignedBuffer<float> mask_;
};

}  // namespace ddl
