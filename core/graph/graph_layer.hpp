// A piece of a network given as a graph of operators (operator.hpp), one input to one output, with its
// backward by reverse-mode differentiation: what an imported graph needs where its nodes are not ddl's own
// layers (a vision transformer's reshapes and matrix products, attention over a convolution's output, a
// group normalisation as PyTorch exports it, paths that fork and meet in any nodes). The model sees one
// layer, so a pipeline cuts before or after it. A graph cut into parts (GraphEnds) is a chain of graph
// layers that hand each other the several values crossing each cut, packed in one tensor, so that a
// pipeline may cut there too.
//
// Values are numbered: the inputs (0, or one a value the layer takes), then the parameters (param_specs),
// then the constants, then each operator's output in order; the last operator's output is the layer's
// unless it hands values on. Every value is plain row-major f32 (a Reshape's is its input's numbers),
// leased from the buffer pool in forward: kept until the layer's backward where some operator's backward
// reads it (Operator::backward_reads_input), given back once forward is past it where none does. Their
// gradients are leased in backward from the first operator that adds to one to the operator that
// consumes it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/operator.hpp"
#include "core/layers/layer.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

struct GraphConstant {
  dims_t dims;
  std::vector<float> values;
  // A statistic an operator moves in training (a BatchNormalization's running mean and variance): part of the
  // layer's state, which checkpoints keep.
  bool running = false;
};

// Where the batch is in the layer's input: the axis that is `per_batch` times the batch size (attention's
// [tokens, batch, features] has it on axis 1). Shapes the graph gives in multiples of the batch (kBatchTimes)
// are resolved from it.
struct BatchAxis {
  int axis = 0;
  std::int64_t per_batch = 1;
};

// A value crossing a cut between two graph layers: its dims for a batch of 1 and the axis that grows with
// the batch (dims[batch_axis] * N for N images).
struct CrossingValue {
  dims_t dims;
  int batch_axis = 0;
};

// Where a graph layer is one part of a graph cut in several: the values crossing the cut before it, which
// its input holds ([N, K]: one after another, each in full, K their numbers for one image), and the values
// crossing the cut after it, which its output holds alike. Empty lists: one input, the layer's input
// itself, and one output, the last operator's.
struct GraphEnds {
  std::vector<CrossingValue> takes;  // values 0, 1, ... in this order
  std::vector<int> hands_on;         // by number
};

class GraphLayer : public Layer {
 public:
  // Throws InputError naming the node for an operator ddl does not have, or inputs that come later.
  // `seed` seeds the generators of its random operators (Dropout), each its own stream. `batch` says where
  // the batch is in a single input.
  GraphLayer(std::vector<ParamSpec> params, std::vector<GraphConstant> constants, std::vector<OpSpec> ops,
             BatchAxis batch = {}, std::uint64_t seed = 0, GraphEnds ends = {});
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override { return params_; }
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  // Throws InputError naming the operator whose inputs' shapes it cannot take.
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  // The same check of every operator's shapes for an input of dims `in`, before any step (as the importer
  // builds it), so that a graph ddl cannot run is refused then, not in the first step.
  void check_shapes(const dims_t& in);
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  // Its running statistics, "constant<c>", then the generators of its random operators, "op<k>.rng".
  std::vector<StateView> state() override;
  bool accumulate_gradients(bool on) override {
    accumulate_ = on;
    return true;
  }
  // It reads a plain input in place and keeps it where some operator's backward reads it; its output where
  // the last operator's backward (or that of one computing a value handed on) reads it.
  bool backward_reads_output() const override { return output_read_back_; }
  bool backward_reads_input() const override { return in_place_ && input_read_back_; }
  void release_activations(Context& ctx) override {
    give_back_values(ctx);
    release_output(ctx);
  }

 private:
  // Where an operator's output is: its own storage, leased in forward; its input's (a Reshape's); or in the
  // layer's output (the last operator's, or a value handed on).
  enum class Place { own, alias, output };

  std::size_t input_count() const { return ends_.takes.empty() ? 1 : ends_.takes.size(); }
  // Where the operators' outputs start among the values: after the inputs, parameters and constants.
  std::size_t first_op() const { return input_count() + params_.size() + constants_.size(); }
  // The input values' dims and places in the input for an input of dims `in`; returns the batch size.
  std::int64_t take_inputs(const dims_t& in);
  // Every value's dims for an input of dims `in` (take_inputs, the parameters and constants, infer_dims), and
  // the parameters' and constants' numbers where bound; returns the batch size.
  std::int64_t lay_out_values(const dims_t& in);
  // Each operator's output dims, in order, checked; whether each value takes a gradient.
  void infer_dims(std::int64_t batch);
  // Each operator's place, which values a backward reads, and after which operator forward is done with
  // each value no backward reads.
  void plan_storage();
  void give_back_after(std::size_t k, int root);
  // In forward: the input values over the input, in place where it is plain, else over a plain copy.
  void point_inputs(Context& ctx, const Tensor& src);
  void give_back_root(Context& ctx, int root);
  // What forward leased: the operators' own storage and the input's copy.
  void give_back_values(Context& ctx);
  void give_back_gradients(Context& ctx);
  // The gradient of operator k's output, leased and zeroed where it has none yet (an alias's: its input's).
  void lease_gradient(Context& ctx, std::size_t k);

  std::vector<ParamSpec> params_;
  std::vector<GraphConstant> constants_;
  BatchAxis batch_;
  GraphEnds ends_;
  std::vector<std::size_t> input_offsets_, output_offsets_;  // where each value taken or handed on starts
  std::size_t handed_numbers_ = 0;                           // the values handed on, for the whole batch
  std::vector<std::unique_ptr<Operator>> ops_;
  std::vector<ParamView> views_;
  std::vector<OpValue> values_;
  std::vector<std::vector<const OpValue*>> inputs_;  // by operator, into values_: found at set-up
  std::vector<Place> place_;                         // by operator
  std::vector<std::size_t> place_offset_;            // by operator placed in the output
  std::vector<int> root_;                            // by value: whose storage it is (an alias: its input's)
  std::vector<bool> read_back_;                      // by root: some backward reads it
  std::vector<std::vector<int>> given_back_after_;   // by operator, and after the values handed on: roots done
  std::vector<Tensor> storage_, output_grads_;       // by operator; leased
  Tensor input_copy_, input_grad_, scratch_;         // leased; the input's two where it is not plain
  std::vector<bool> needs_grad_;                     // by value
  std::size_t largest_ = 0;                          // the most numbers an operator reads or writes
  dims_t input_dims_;
  std::optional<Copy> to_plain_, to_src_layout_;
  bool train_ = false, need_diff_src_ = false, accumulate_ = false;
  bool in_place_ = false, input_read_back_ = false, output_read_back_ = false;
};

}  // namespace ddl
