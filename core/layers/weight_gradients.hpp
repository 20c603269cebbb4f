// Where a convolution's or dense layer's backward-weights primitive writes its weight and bias
// gradients, and how they reach the parameters' gradient slices: straight in when oneDNN's layout is the
// plain one and the step overwrites; otherwise into buffers leased for the call, then reordered into
// the slices, replacing or adding. Adding is how micro-batches accumulate their gradients in the one
// gradient buffer, with no second buffer of the model's size.
#pragma once

#include <optional>
#include <unordered_map>

#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

class WeightGradients {
 public:
  // At set-up: the primitive's diff-weights layout; `bias` may be an empty ParamMemory.
  void setup(Context& ctx, const dnnl::memory::desc& diff_weights_md, const ParamMemory& weights,
             const ParamMemory& bias) {
    md_ = diff_weights_md;
    weights_ = weights.grad;
    bias_ = bias.grad;
    replace_.emplace(ctx, md_, weights_.get_desc());
    add_.emplace(ctx, md_, weights_.get_desc(), Copy::Mode::add);
    if (bias_) add_bias_.emplace(ctx, bias_.get_desc(), bias_.get_desc(), Copy::Mode::add);
  }
  void set_accumulate(bool on) { accumulate_ = on; }

  // Adds DIFF_WEIGHTS (and DIFF_BIAS) to the primitive's arguments.
  void bind(Context& ctx, std::unordered_map<int, dnnl::memory>& args) {
    if (accumulate_ || md_ != weights_.get_desc()) leased_ = ctx.lease(md_);
    args.insert({DNNL_ARG_DIFF_WEIGHTS, leased_.empty() ? weights_ : leased_.memory()});
    if (!bias_) return;
    if (accumulate_) leased_bias_ = ctx.lease(bias_.get_desc());
    args.insert({DNNL_ARG_DIFF_BIAS, leased_bias_.empty() ? bias_ : leased_bias_.memory()});
  }
  // After the primitive ran: moves what it wrote into the gradient slices.
  void finish(Context& ctx) {
    if (!leased_.empty()) {
      (accumulate_ ? *add_ : *replace_)(ctx, leased_.memory(), weights_);
      ctx.give_back(leased_);
    }
    if (!leased_bias_.empty()) {
      (*add_bias_)(ctx, leased_bias_.memory(), bias_);
      ctx.give_back(leased_bias_);
    }
  }

 private:
  dnnl::memory::desc md_;
  dnnl::memory weights_, bias_;
  std::optional<Copy> replace_, add_, add_bias_;
  Tensor leased_, leased_bias_;
  bool accumulate_ = false;
};

}  // namespace ddl
