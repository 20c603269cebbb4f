// A model: an ordered list of layers plus the two flat buffers that hold every parameter and every
// gradient, in layer order. Layers see slices of those buffers; optimizers and all-reduce see the
// whole. The model sets its layers up again only when the input shape or the mode changes.
//
// A model may also be one stage of a pipeline: keep_layers() drops the layers outside a contiguous
// range before finalize(). A stage names and initialises its parameters exactly as the whole model
// would, so its flat buffer is the slice [param_offset(), param_offset() + param_count()) of the whole
// model's, bit for bit.
//
// A layer may also be split across a tensor group (split_layers): each rank then holds a slice of its
// parameters, and whole_segments() says where the rank's values lie in the whole model's buffer.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/layers/layer.hpp"
#include "core/layers/open_block.hpp"
#include "core/profiler.hpp"
#include "core/tensor_group.hpp"

namespace ddl {

// Where one parameter array lives in the flat buffers.
struct ParamEntry {
  std::size_t layer;  // index in this model (or stage)
  std::string name;   // "<layer index in the whole model>.<param name>", e.g. "0.weight"
  ParamSpec spec;
  std::size_t offset;
  std::size_t size;
  std::size_t whole_offset;  // of the whole array in the whole model's flat buffer (checkpoints)
};

// A layer's parameters in the flat buffer (count 0: none).
struct ParamRange {
  std::size_t offset = 0, count = 0;
  bool operator==(const ParamRange&) const = default;
};

// Where a piece of this rank's flat buffer lies in the whole model's: `blocks` runs of `count` values,
// one after another here (from `offset`), `stride` apart there (from `whole_offset`).
struct WholeSegment {
  std::size_t offset, whole_offset, count, blocks, stride;
};

class Model {
 public:
  // input_shape is one image, [C, H, W].
  Model(std::string name, dims_t input_shape, int num_classes);

  // `input_dims`: one image's dims of the value the layer takes, where the builder knows them. A pipeline
  // stage that starts with the layer between a Fork and its Join (open_block.hpp) receives that value packed
  // with the side values, and sets itself up for these dims.
  void add(std::unique_ptr<Layer> layer, dims_t input_dims = {});
  // Before keep_layers and finalize: splits the layers at these indices (ascending) across `group`: dense
  // layers (SplitDense, the first of them gathering the group's batch) and transformer blocks
  // (split_transformer_block, on a batch the group shares). Throws InputError for a layer that cannot be split.
  void split_layers(const std::vector<std::size_t>& layers, TensorGroup& group);
  // Before finalize: keeps only layers [begin, end) of the whole model (a pipeline stage).
  void keep_layers(std::size_t begin, std::size_t end);
  // Allocates the flat buffers and binds every layer to its slices; no layer may be added after. With
  // `share`, a finalized copy of the same model (or stage), binds to its buffers instead of allocating:
  // the copies hold separate activations for micro-batches in flight over one set of parameters.
  void finalize(Context& ctx, Model* share = nullptr);
  // Fills the parameters from the initialisers named in each ParamSpec; same seed, same bits. A parameter
  // given a starting value (set_starting_values) takes this rank's part of it instead; the starting
  // values are dropped then (and by a copy's finalize, which binds to initialised parameters).
  void initialize(std::uint64_t seed);
  // Whole arrays by parameter name ("<layer>.<name>", whole_size values each): an imported graph's weights,
  // which the model is to start from rather than from drawn values.
  using StartingValues = std::map<std::string, std::vector<float>>;
  void set_starting_values(std::shared_ptr<const StartingValues> values) { starting_values_ = std::move(values); }
  // Before finalize: parameters that are one weight of the network (an imported graph's initializer that
  // several layers read), each group by name. They start equal, and tie_gradients gives each member the
  // sum of the group's gradients, so that they stay equal: the weight is trained as one. finalize throws
  // InputError where a group's members are not all whole in this model (pipeline stages or a split layer
  // that part them).
  void tie_parameters(std::vector<std::vector<std::string>> groups) { tied_names_ = std::move(groups); }
  bool has_tied_parameters() const { return !tied_.empty(); }  // after finalize
  // By layer of the whole model (`layers` of them): whether a weight it shares with an earlier layer keeps it
  // in that layer's pipeline stage, so that no cut may fall before it. A stage knows it too.
  std::vector<bool> kept_with_previous(std::size_t layers) const;
  // After a step's gradients are complete (averaged over replicas: the sum is linear either way).
  void tie_gradients();

  // input: a batch of images, or for a later pipeline stage the previous stage's output; with recomputation
  // it must stay alive and unchanged until backward.
  const Tensor& forward(Context& ctx, const Tensor& input, Mode mode);
  // Runs every layer's backward from the last; after layer i, calls on_gradients_ready with the range of
  // the flat gradient buffer that is now complete (a data-parallel reducer can start on it). diff_output
  // has the layout of the last forward's output. Returns the gradient of the input for a later pipeline
  // stage (valid until release_input_gradient), an empty tensor for the first.
  const Tensor& backward(Context& ctx, const Tensor& diff_output);
  // When on, backward adds to the gradient buffer instead of overwriting it: micro-batches accumulate.
  void accumulate_gradients(bool on) { accumulate_ = on; }
  void release_input_gradient(Context& ctx);
  std::function<void(std::size_t offset, std::size_t count)> on_gradients_ready;
  // Called after every layer of a training forward and backward: a pipeline's messages in flight move on.
  std::function<void()> between_layers;
  // Called in training around every run of a layer that has parameters (its forward, a recomputed forward, its
  // backward), before with the layer's range and that of the next layer to run with parameters in this pass
  // (count 0: none, or not known), after with the layer's: sharded parameters (ZeRO's stage 3) are gathered
  // and given back there.
  std::function<void(ParamRange now, ParamRange next)> before_layer;
  std::function<void(ParamRange now)> after_layer;
  // Activation recomputation (Chen et al., 2016, "Training Deep Nets with Sublinear Memory Cost"): the
  // layers form about sqrt(layers) segments of about equal output bytes; a training forward keeps only each
  // segment's input, and backward runs the segment's forward again before its backward. The last segment
  // keeps its activations, as backward needs them first. The gradients are the same bits: the forward is
  // the same, and each segment's layer state (BatchNorm's running statistics, dropout's generators) is set
  // back before it runs again.
  void recompute_activations(bool on) { recompute_ = on; }

  const std::string& name() const { return name_; }
  const dims_t& input_shape() const { return input_shape_; }
  // The type to give this model its input in: bf16 where `ctx` computes in bf16 and the first layer takes
  // it (images then come bf16 from the loader, not converted in the step), else f32. It chooses the
  // layers' output types for `ctx` to answer, as setup() does.
  dt input_type(const Context& ctx);
  int num_classes() const { return num_classes_; }
  std::size_t num_layers() const { return layers_.size(); }
  // Where this stage sits in the whole model (0, all layers, all parameters for a whole model).
  std::size_t first_layer() const { return first_layer_; }
  std::size_t whole_layer_count() const { return whole_layers_; }
  std::size_t param_offset() const { return param_offset_; }
  std::size_t whole_param_count() const { return whole_params_; }
  bool is_first_stage() const { return first_layer_ == 0; }
  bool is_last_stage() const { return first_layer_ + layers_.size() == whole_layers_; }
  // Parameters of layer i, known before finalize.
  std::size_t layer_param_count(std::size_t i) const;
  // Output descriptors of the current set-up, one per layer.
  const std::vector<dnnl::memory::desc>& output_descs() const { return output_mds_; }
  // That of forward's output: the last layer's, or where side values cross the stage's end, the values
  // packed (below).
  const dnnl::memory::desc& output_desc() const { return outgoing_.empty() ? output_mds_.back() : packed_output_md_; }
  // One image's bytes (f32) of the side values that cross the cut after layer i of the whole model, which
  // a pipeline stage ending there sends besides layer i's output.
  double side_bytes_after(std::size_t i) const;
  Layer& layer(std::size_t i) { return *layers_[i]; }
  std::span<float> params() { return params_view_; }
  std::span<float> grads() { return grads_view_; }
  std::span<const float> params() const { return params_view_; }
  const std::vector<ParamEntry>& param_entries() const { return entries_; }
  std::size_t param_count() const { return params_view_.size(); }
  // Where this rank's flat buffer lies in the whole model's: one segment unless layers are split.
  std::vector<WholeSegment> whole_segments() const;
  // The ranges (offset, count) of the flat buffer that hold whole parameters, not a split layer's share:
  // every rank of a tensor group holds them, and their gradients are averaged over the group.
  std::vector<std::pair<std::size_t, std::size_t>> whole_param_ranges() const;
  // Whether a split layer (on this stage or an earlier one) gathers the tensor group's batch in training.
  bool gathers_batch() const { return batch_gather_layer_ != static_cast<std::size_t>(-1); }
  // Every layer's non-trainable state, named "<layer index>.<name>".
  std::vector<StateView> state();

  // A table of layers, output shapes (for batch 1) and parameter counts.
  std::string summary(Context& ctx);
  void attach_profiler(Profiler* profiler) { profiler_ = profiler; }

 private:
  void setup(Context& ctx, const dnnl::memory::desc& input_md, Mode mode);
  // The side values opened before layer i of the whole model and closed at or after it, in their Forks' order:
  // before keep_layers, whose stage no longer sees the layers outside it.
  std::vector<std::shared_ptr<SideValue>> sides_crossing(std::size_t i) const;
  // A stage's values at a cut where side values cross: the chain's value and then each side value, each in
  // full (all the batch's numbers, plain f32) one after another, in one tensor of dims [N, K] (K the numbers
  // of one image): value-major, so row n is not image n. The receiving stage unpacks them into tensors
  // leased until release_input_gradient.
  dnnl::memory::desc receive_descs(const dnnl::memory::desc& packed);
  const Tensor& unpack_input(Context& ctx, const Tensor& input);
  const Tensor& pack_output(Context& ctx, const Tensor& output);
  const Tensor& unpack_output_gradient(Context& ctx, const Tensor& diff);
  const Tensor& pack_input_gradient(Context& ctx, const Tensor& diff);
  const std::vector<float>* starting_value(const std::string& name) const;  // null where none was given
  void plan_segments(Context& ctx);
  std::size_t segment_count() const;  // of the current set-up (0 before the first forward)
  bool starts_segment(std::size_t i) const;  // i == num_layers() is the end, not a start
  // Whether layer i lies in a segment whose activations are dropped and recomputed (all but the last).
  bool recomputed(std::size_t i) const;
  void keep_segment_start(Context& ctx, std::size_t first, const Tensor& input);
  void recompute_segment(Context& ctx, std::size_t segment);
  void plan_param_uses();
  ParamRange param_range(std::size_t i) const { return {layer_param_begin_[i], layer_param_begin_[i + 1] - layer_param_begin_[i]}; }
  void use_params(std::size_t i);   // before_layer, with the next of param_uses_
  void done_with_params(std::size_t i);

  std::string name_;
  dims_t input_shape_;
  int num_classes_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<dims_t> input_dims_;                               // by layer, as added; empty where not known
  std::vector<std::shared_ptr<SideValue>> incoming_, outgoing_;  // crossing this stage's first and last cut
  dims_t stage_input_dims_;  // the chain's value entering the stage, one image, where it comes packed
  dnnl::memory::desc packed_output_md_;
  Tensor unpacked_input_, packed_output_, unpacked_output_grad_, packed_input_grad_;
  std::size_t first_layer_ = 0, whole_layers_ = 0;  // whole_layers_ is set by keep_layers or finalize
  std::size_t batch_gather_layer_ = static_cast<std::size_t>(-1);  // whole index (split_layers)
  std::size_t first_entry_ = 0, param_offset_ = 0, whole_params_ = 0;
  std::vector<ParamEntry> entries_;
  std::vector<std::size_t> layer_param_begin_;  // flat offset of each layer's first parameter, plus the end
  void resolve_tied_parameters();
  std::vector<std::vector<std::string>> tied_names_;
  struct TiedGroup {
    std::vector<std::size_t> offsets;  // each member's, in the flat buffers
    std::size_t size;                  // of each member
  };
  std::vector<TiedGroup> tied_;
  AlignedBuffer<float> params_, grads_;  // empty when sharing another copy's
  std::span<float> params_view_, grads_view_;
  bool finalized_ = false;
  dnnl::memory::desc setup_md_;
  Mode setup_mode_ = Mode::train;
  std::vector<dnnl::memory::desc> output_mds_;
  Profiler* profiler_ = nullptr;
  bool accumulate_ = false;
  std::shared_ptr<const StartingValues> starting_values_;
  bool recompute_ = false;
  // What a recomputed segment's forward starts from: its input, and its layers' state as it was.
  struct SegmentStart {
    const Tensor* input = nullptr;
    Tensor input_copy;  // leased from the forward that makes it to the segment's backward
    std::vector<std::vector<float>> floats;
    std::vector<std::vector<std::uint64_t>> words;
  };
  std::vector<SegmentStart> segment_starts_;
  std::vector<std::size_t> segment_of_;  // each layer's segment
  // The layers with parameters in the order a training forward and backward run them (recomputed segments
  // included), and how far this pass has come.
  std::vector<std::size_t> param_uses_;
  std::size_t param_use_ = 0;
};

}  // namespace ddl
