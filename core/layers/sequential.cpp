#include "core/layers/sequential.hpp"

#include "core/error.hpp"

namespace ddl {

std::string Sequential::describe() const {
  if (!name_.empty()) return name_;
  std::string s;
  for (const auto& l : layers_) s += (s.empty() ? "" : ", ") + l->describe();
  return "[" + s + "]";
}

std::vector<ParamSpec> Sequential::param_specs() const {
  std::vector<ParamSpec> all;
  for (std::size_t i = 0; i < layers_.size(); ++i) append_prefixed(all, layers_[i]->param_specs(), std::to_string(i));
  return all;
}

void Sequential::bind(const std::vector<ParamView>& views, Context& ctx) {
  std::vector<Layer*> parts;
  for (auto& l : layers_) parts.push_back(l.get());
  bind_in_order(parts, views, ctx);
}

void Sequential::set_output_type(const Context& ctx, dt type) {
  output_type_ = type;
  choose_output_types(ctx, layers_, type);
}

dnnl::memory::desc Sequential::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  if (layers_.empty()) throw Error("sequential " + name_ + ": no layers");
  set_output_type(ctx, output_type_);  // when no enclosing model or block did
  move_relu_backward_into_pools(layers_);
  dnnl::memory::desc md = src;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    // A part's gradient comes from the next part, which gives it up; the last part's is the caller's.
    layers_[i]->set_may_overwrite_diff_dst(i + 1 < layers_.size() || may_overwrite_diff_dst_);
    md = layers_[i]->setup(ctx, md, mode, need_diff_src || i > 0);
  }
  return md;
}

const Tensor& Sequential::forward(Context& ctx, const Tensor& src) {
  const Tensor* x = &src;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    x = &layers_[i]->forward(ctx, *x);
    if (i > 0) release_unread_output(ctx, *layers_[i - 1], *layers_[i]);
  }
  return *x;
}

const Tensor& Sequential::backward(Context& ctx, const Tensor& diff_dst) {
  const Tensor* g = &diff_dst;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    g = &layers_[i]->backward(ctx, *g);
    if (i + 1 < layers_.size()) release_after_backward(ctx, *layers_[i + 1], i + 2 < layers_.size());
  }
  return *g;
}

void Sequential::release_gradient(Context& ctx) {
  if (!layers_.empty()) release_after_backward(ctx, *layers_[0], layers_.size() > 1);
}

std::vector<StateView> Sequential::state() {
  std::vector<StateView> all;
  for (std::size_t i = 0; i < layers_.size(); ++i) append_prefixed(all, layers_[i]->state(), std::to_string(i));
  return all;
}

}  // namespace ddl
