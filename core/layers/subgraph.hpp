// A piece of a network given as operations on N-d tensors, one input to one output, with its backward by
// reverse-mode differentiation: what an imported graph needs where its nodes are not ddl's layers (a vision
// transformer's reshapes and transposes, its matrix products and softmax, the arithmetic of its layer norms
// and GELU as PyTorch exports them). The model still sees one layer, so a pipeline cuts before or after it.
//
// Values are numbered: 0 the input, then the parameters (param_specs), then the constants, then each
// operation's output in order; the last operation's output is the layer's. Every value is plain row-major
// f32 and kept from forward to backward; their gradients are leased from the pool for the layer's backward
// only. Matrix products, softmax, layer norms and GELU run on oneDNN, the products in bf16 where the context
// computes in bf16 (their operands converted for the call, the results f32); the element-wise arithmetic with
// broadcasting and the data movement are loops here, in f32.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/layers/layer.hpp"
#include "core/layers/matmul_product.hpp"
#include "core/layers/relayout.hpp"

namespace ddl {

// In a reshape's or an expand's shape, kBatchTimes * k (k >= 1) stands for k times the batch size, which the
// layer learns at set-up.
inline constexpr std::int64_t kBatchTimes = -2147483647;

struct SubgraphOp {
  enum class Kind {
    add, sub, mul, div,  // numpy broadcasting
    pow,                 // by the constant `exponent`
    sqrt, erf, relu, sigmoid, tanh, identity,
    gelu,                // the exact, erf-based one (oneDNN's eltwise)
    matmul,              // numpy's: the last two axes, the others batch (broadcast where the second operand's are 1);
                         // transpose_b: the second operand is a matrix [cols, inner] read transposed in place;
                         // a third input, [cols], is a bias added to every row
    softmax,             // along `axis`
    layer_norm,          // over the last axis, inputs x, scale and shift (oneDNN's), with `epsilon`
    reduce_mean,         // over `ints` (axes), keeping them where keep_dims
    transpose,           // ints: the permutation
    reshape,             // ints: the shape, 0 for the input's dimension, -1 for what is left, batch multiples
    squeeze,             // ints: the axes of size 1 it drops (every such axis but the batch's where none are given)
    unsqueeze,           // ints: the axes of size 1 it inserts, as numbered in the output
    expand,              // ints: the shape it broadcasts to
    concat,              // along `axis`
    slice,               // ints: the axes, with starts, ends and steps (positive), clamped as ONNX does
    gather,              // along `axis`, at the constant `indices`; scalar_index drops the axis
  };
  Kind kind = Kind::identity;
  std::vector<int> inputs;
  std::vector<std::int64_t> ints, starts, ends, steps, indices;
  std::int64_t axis = 0;
  float exponent = 1;
  float epsilon = 1e-5f;
  bool keep_dims = true;
  bool scalar_index = false;
  bool transpose_b = false;
  std::string name;  // the graph's node, for messages
};

struct SubgraphConstant {
  dims_t dims;
  std::vector<float> values;
};

class Subgraph : public Layer {
 public:
  Subgraph(std::vector<ParamSpec> params, std::vector<SubgraphConstant> constants, std::vector<SubgraphOp> ops);
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override { return params_; }
  void bind(const std::vector<ParamView>& views, Context& ctx) override;
  // Throws InputError naming the operation whose inputs' shapes it cannot take.
  dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) override;
  const Tensor& forward(Context& ctx, const Tensor& src) override;
  const Tensor& backward(Context& ctx, const Tensor& diff_dst) override;
  bool accumulate_gradients(bool on) override {
    accumulate_ = on;
    return true;
  }
  // It keeps its own copies of what backward reads.
  bool backward_reads_output() const override { return false; }
  bool backward_reads_input() const override { return false; }

 private:
  struct Value {
    dims_t dims;
    float* data = nullptr;
    float* grad = nullptr;  // null where no gradient flows (constants, or inference)
  };
  // A matrix product's primitives, built at set-up: forward, and the two gradients (adding to them).
  struct MatMul {
    dnnl::memory::desc a, b, c, a_t, b_t, c_t, bias;  // the operands, and seen transposed; the bias as [1, cols]
    MatmulProduct forward, grad_a, grad_b;
    bool transpose_b = false;  // b's gradient is c_t by a, in b's stored [cols, inner] form
  };
  struct SoftmaxPrimitives {
    dnnl::memory::desc data;
    dnnl::softmax_forward forward;
    std::optional<dnnl::softmax_backward> backward;
  };
  struct GeluPrimitives {
    dnnl::memory::desc data;
    dnnl::eltwise_forward forward;
    std::optional<dnnl::eltwise_backward> backward;
  };
  struct LayerNormPrimitives {
    dnnl::memory::desc data, vector;  // x as [rows, features]; scale and shift
    dnnl::layer_normalization_forward forward;
    std::optional<dnnl::layer_normalization_backward> backward;
    Tensor mean, variance, diff_scale, diff_shift;
  };

  // Where the operations' outputs start among the values: after the input, parameters and constants.
  std::size_t first_op() const { return 1 + params_.size() + constants_.size(); }
  void forward_op(Context& ctx, std::size_t k);
  void backward_op(Context& ctx, std::size_t k);
  dims_t output_dims(const SubgraphOp& op, std::int64_t batch) const;
  [[noreturn]] void fail(const SubgraphOp& op, const std::string& problem) const;

  std::vector<ParamSpec> params_;
  std::vector<SubgraphConstant> constants_;
  std::vector<SubgraphOp> ops_;
  std::vector<ParamView> views_;
  std::vector<Value> values_;
  Tensor input_, input_grad_;                   // the input, plain
  std::vector<Tensor> outputs_, output_grads_;  // by operation; the gradients leased for backward only
  std::vector<bool> needs_grad_;                // by value
  std::vector<std::optional<MatMul>> matmuls_;                 // by operation
  std::vector<std::optional<SoftmaxPrimitives>> softmaxes_;    // by operation
  std::vector<std::optional<LayerNormPrimitives>> norms_;      // by operation
  std::vector<std::optional<GeluPrimitives>> gelus_;           // by operation
  std::vector<float> scratch_;
  dnnl::memory::desc src_md_;
  std::optional<Copy> to_plain_, to_src_layout_;
  bool train_ = false, need_diff_src_ = false, accumulate_ = false;
};

}  // namespace ddl
