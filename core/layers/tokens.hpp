// The layers that turn an image into a sequence of tokens and back to one vector, for vision
// transformers (Dosovitskiy et al., 2021):
//   ImageToTokens         [N, C, h, w] (a patch-embedding convolution's output) -> [N, h*w, C]
//   ClassTokenAndPosition [N, T, D] -> [N, T+1, D]: a learned class token in front, plus a learned
//                         position embedding added to every token
//   TakeClassToken        [N, T, D] -> [N, D]: token 0, which the classifier head reads
#pragma once

#include <optional>

#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

class ImageToTokens : public Layer {
 public:
  std::string describe() const override { return "image to tokens"; }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;

 private:
  dnnl::memory::desc channels_last_;  // [N, C, h, w] laid out as nhwc: the token tensor's own memory
  std::optional<Copy> to_tokens_, to_image_;
  Tensor dst_;
};

class ClassTokenAndPosition : public Layer {
 public:
  // tokens: the sequence length before the class token is added.
  ClassTokenAndPosition(int tokens, int dim) : tokens_(tokens), dim_(dim) {}
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;

 private:
  int tokens_, dim_;
  ParamView class_token_, position_;
  bool need_diff_src_ = false;
  Tensor dst_;
};

class TakeClassToken : public Layer {
 public:
  std::string describe() const override { return "take class token"; }
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;

 private:
  dims_t in_;
  bool need_diff_src_ = false;
  Tensor dst_;
};

}  // namespace ddl
