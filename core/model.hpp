// A model: an ordered list of layers plus the two flat buffers that hold every parameter and every
// gradient, in layer order. Layers see slices of those buffers; optimizers and all-reduce see the
// whole. The model sets its layers up again only when the input shape or the mode changes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/layers/layer.hpp"
#include "core/profiler.hpp"

namespace ddl {

// Where one parameter array lives in the flat buffers.
struct ParamEntry {
  std::size_t layer;
  std::string name;  // "<layer index>.<param name>", e.g. "0.weight"
  ParamSpec spec;
  std::size_t offset;
  std::size_t size;
};

class Model {
 public:
  // input_shape is one image, [C, H, W].
  Model(std::string name, dims_t input_shape, int num_classes);

  void add(std::unique_ptr<Layer> layer);
  // Allocates the flat buffers and binds every layer to its slices; no layer may be added after.
  void finalize(Context& ctx);
  // Fills the parameters from the initialisers named in each ParamSpec; same seed, same bits.
  void initialize(std::uint64_t seed);

  const Tensor& forward(Context& ctx, const Tensor& input, Mode mode);
  // Runs every layer's backward from the last; after layer i, calls on_gradients_ready with the range of
  // the flat gradient buffer that is now complete (a data-parallel reducer can start on it).
  void backward(Context& ctx, const Tensor& diff_logits);
  std::function<void(std::size_t offset, std::size_t count)> on_gradients_ready;

  const std::string& name() const { return name_; }
  const dims_t& input_shape() const { return input_shape_; }
  int num_classes() const { return num_classes_; }
  std::size_t num_layers() const { return layers_.size(); }
  Layer& layer(std::size_t i) { return *layers_[i]; }
  std::span<float> params() { return params_.span(); }
  std::span<float> grads() { return grads_.span(); }
  std::span<const float> params() const { return params_.span(); }
  const std::vector<ParamEntry>& param_entries() const { return entries_; }
  std::size_t param_count() const { return params_.size(); }
  // Every layer's non-trainable state, named "<layer index>.<name>".
  std::vector<StateView> state();

  // A table of layers, output shapes (for batch 1) and parameter counts.
  std::string summary(Context& ctx);
  void attach_profiler(Profiler* profiler) { profiler_ = profiler; }

 private:
  void setup(Context& ctx, const dnnl::memory::desc& input_md, Mode mode);

  std::string name_;
  dims_t input_shape_;
  int num_classes_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<ParamEntry> entries_;
  std::vector<std::size_t> layer_param_begin_;  // flat offset of each layer's first parameter, plus the end
  AlignedBuffer<float> params_, grads_;
  bool finalized_ = false;
  dnnl::memory::desc setup_md_;
  Mode setup_mode_ = Mode::train;
  std::vector<dnnl::memory::desc> output_mds_;
  Profiler* profiler_ = nullptr;
};

}  // namespace ddl
