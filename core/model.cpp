#include "core/model.hpp"

#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "core/initializer.hpp"

namespace ddl {

Model::Model(std::string name, dims_t input_shape, int num_classes)
    : name_(std::move(name)), input_shape_(std::move(input_shape)), num_classes_(num_classes) {
  if (input_shape_.size() != 3) throw Error("model " + name_ + ": input shape must be [C, H, W]");
}

void Model::add(std::unique_ptr<Layer> layer) {
  if (finalized_) throw Error("model " + name_ + ": add() after finalize()");
  layers_.push_back(std::move(layer));
}

void Model::finalize(Context& ctx) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layer_param_begin_.push_back(total);
    for (const auto& spec : layers_[i]->param_specs()) {
      const std::size_t n = product(spec.dims);
      entries_.push_back({i, std::to_string(i) + "." + spec.name, spec, total, n});
      total += n;
    }
  }
  layer_param_begin_.push_back(total);
  params_ = AlignedBuffer<float>(total);
  grads_ = AlignedBuffer<float>(total);
  std::size_t e = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::vector<ParamView> views;
    for (; e < entries_.size() && entries_[e].layer == i; ++e)
      views.push_back({params_.span().subspan(entries_[e].offset, entries_[e].size),
                       grads_.span().subspan(entries_[e].offset, entries_[e].size)});
    layers_[i]->bind(views, ctx);
  }
  finalized_ = true;
}

void Model::initialize(std::uint64_t seed) {
  for (std::size_t e = 0; e < entries_.size(); ++e)
    initialize_param(entries_[e].spec, params_.span().subspan(entries_[e].offset, entries_[e].size), seed, e);
}

void Model::setup(Context& ctx, const dnnl::memory::desc& input_md, Mode mode) {
  if (!finalized_) throw Error("model " + name_ + ": forward before finalize()");
  const dims_t d = input_md.dims();
  if (d.size() != 4 || d[1] != input_shape_[0] || d[2] != input_shape_[1] || d[3] != input_shape_[2])
    throw InputError("model " + name_ + " expects images [C, H, W] = " + to_string(input_shape_) + ", got a batch " +
                     to_string(d));
  output_mds_.clear();
  dnnl::memory::desc md = input_md;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    md = layers_[i]->setup(ctx, md, mode, i > 0);
    output_mds_.push_back(md);
  }
  const dims_t out = md.dims();
  if (out.size() != 2 || out[1] != num_classes_)
    throw Error("model " + name_ + ": last layer gives " + to_string(out) + ", expected [N, " +
                std::to_string(num_classes_) + "]");
  setup_md_ = input_md;
  setup_mode_ = mode;
}

const Tensor& Model::forward(Context& ctx, const Tensor& input, Mode mode) {
  if (output_mds_.empty() || input.desc() != setup_md_ || mode != setup_mode_) setup(ctx, input.desc(), mode);
  Profiler* prof = mode == Mode::train ? profiler_ : nullptr;
  if (prof) {
    std::vector<std::string> names;
    for (auto& l : layers_) names.push_back(l->describe());
    prof->resize(names);
  }
  const Tensor* x = &input;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    auto t0 = Profiler::clock::now();
    x = &layers_[i]->forward(ctx, *x);
    if (prof) prof->add_forward(i, Profiler::clock::now() - t0);
  }
  return *x;
}

void Model::backward(Context& ctx, const Tensor& diff_logits) {
  if (setup_mode_ != Mode::train) throw Error("model " + name_ + ": backward after an inference forward");
  const Tensor* g = &diff_logits;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    auto t0 = Profiler::clock::now();
    g = &layers_[i]->backward(ctx, *g);
    if (i + 1 < layers_.size()) layers_[i + 1]->release_gradient(ctx);  // consumed by layer i
    if (profiler_) profiler_->add_backward(i, Profiler::clock::now() - t0);
    const std::size_t begin = layer_param_begin_[i], end = layer_param_begin_[i + 1];
    if (on_gradients_ready && end > begin) on_gradients_ready(begin, end - begin);
  }
  if (!layers_.empty()) layers_[0]->release_gradient(ctx);
}

std::vector<StateView> Model::state() {
  std::vector<StateView> all;
  for (std::size_t i = 0; i < layers_.size(); ++i) append_prefixed(all, layers_[i]->state(), std::to_string(i));
  return all;
}

std::string Model::summary(Context& ctx) {
  Tensor probe(plain_desc({1, input_shape_[0], input_shape_[1], input_shape_[2]}), ctx.engine());
  setup(ctx, probe.desc(), Mode::infer);
  std::string s = "model " + name_ + ", input " + to_string(input_shape_) + "\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-3s %-32s %-18s %12s\n", "#", "layer", "output", "parameters");
  s += line;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::size_t n = layer_param_begin_[i + 1] - layer_param_begin_[i];
    dims_t out = output_mds_[i].dims();
    out.erase(out.begin());
    std::snprintf(line, sizeof line, "  %-3zu %-32s %-18s %12zu\n", i, layers_[i]->describe().c_str(),
                  to_string(out).c_str(), n);
    s += line;
  }
  std::snprintf(line, sizeof line, "  total parameters: %zu\n", params_.size());
  s += line;
  output_mds_.clear();  // force a fresh set-up for the first real batch
  return s;
}

}  // namespace ddl
