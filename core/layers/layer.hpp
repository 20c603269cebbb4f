// The layer contract (after Caffe's): set up for an input layout, forward, backward. Parameters and their
// gradients are not owned by the layer: the Model keeps all of them in two flat buffers, in a fixed
// order, and binds each layer to its slices, so gradients can be all-reduced in large fused pieces.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"

namespace ddl {

enum class Mode { train, infer };

struct SideValue;  // open_block.hpp

// normal_002: N(0, 0.02^2), the transformers' choice for embeddings.
enum class Init { glorot_uniform, he_uniform, he_normal, normal_002, zeros, ones };

// One parameter array, in its plain user layout (conv weights OIHW, dense weights OI, vectors X).
struct ParamSpec {
  std::string name;
  dims_t dims;
  Init init;
  std::size_t fan_in = 0;
  std::size_t fan_out = 0;
  // Of a layer split across a tensor group (empty whole_dims: the array is whole). This rank holds a part
  // of a whole array of whole_dims, either rows or columns:
  //  - rows: the whole's rows form row_groups equal groups (Q, K and V of a packed projection: 3), and
  //    this rank holds rows [row_begin, row_begin + dims[0] / row_groups) of each group;
  //  - columns (when it holds every row): columns [col_begin, col_begin + dims[1]).
  // Checkpoints and initialisers see the whole array.
  dims_t whole_dims = {};
  dnnl::memory::dim row_begin = 0;
  int row_groups = 1;
  dnnl::memory::dim col_begin = 0;
};

// A parameter's value and gradient: slices of the model's flat buffers.
struct ParamView {
  std::span<float> value;
  std::span<float> grad;
};

// Non-trainable state that checkpoints must keep: BatchNorm running statistics (floats), a dropout
// layer's generator (words). Exactly one of the two spans is used.
struct StateView {
  std::string name;
  std::span<float> floats;
  std::span<std::uint64_t> words;
  // An optimizer's per-parameter array (momentum, moments): the first parameter it holds a value for, past 0
  // where the optimizer keeps a shard of them (ShardedOptimizer).
  std::size_t param_offset = 0;
};

// oneDNN memories over a parameter's value and gradient slices, in the parameter's plain layout.
struct ParamMemory {
  dnnl::memory value, grad;
  ParamMemory() = default;
  ParamMemory(const ParamView& view, const dnnl::memory::desc& md, const dnnl::engine& engine)
      : value(md, engine, view.value.data()), grad(md, engine, view.grad.data()) {}
};

// Appends a part's parameter specs or state views to `all`, each renamed "<prefix>.<name>": how blocks
// and the model name what their layers hold.
template <typename Named>
void append_prefixed(std::vector<Named>& all, std::vector<Named> parts, const std::string& prefix) {
  for (auto& part : parts) {
    part.name = prefix + "." + part.name;
    all.push_back(std::move(part));
  }
}

// A tensor a layer leases from the context's pool while it needs it: its input gradient, from its backward
// until the caller has consumed it (Layer::release_gradient), and its output, from forward until the
// backwards that read it have run (release_after_backward), or only until the next layer's forward where
// no backward reads it (release_unread_output). Only the tensors alive together occupy memory.
class LeasedTensor {
 public:
  // At set-up: the descriptor, or an empty one when no tensor is needed.
  void reset(const dnnl::memory::desc& md) {
    md_ = md;
    tensor_ = Tensor();
    if (home_) home_->lent_ = false;  // the borrowed storage is dropped; the home leases anew
    home_ = nullptr;
    lent_ = false;
  }
  const dnnl::memory::desc& desc() const { return md_; }
  Tensor& get(Context& ctx) {
    if (lent_) throw Error("a layer's output was needed while its storage still held the input gradient");
    if (tensor_.empty()) tensor_ = ctx.lease(md_);
    return tensor_;
  }
  // The same, but in `spare`'s storage where it fits: a layer's output, which nothing reads from the
  // layer's backward until its next forward. The storage goes back to `spare` when given back.
  Tensor& get(Context& ctx, LeasedTensor& spare) {
    if (tensor_.empty() && !spare.tensor_.empty() && spare.tensor_.bytes() >= md_.get_size()) {
      home_ = &spare;
      tensor_ = Tensor(md_, ctx.engine(), spare.tensor_.release_storage());
      spare.tensor_ = Tensor();
      spare.lent_ = true;
    }
    return get(ctx);
  }
  const Tensor& current() const { return tensor_; }
  void give_back(Context& ctx) {
    if (tensor_.empty()) return;
    if (home_) {
      home_->tensor_ = Tensor(home_->md_, ctx.engine(), tensor_.release_storage());
      home_->lent_ = false;
      tensor_ = Tensor();
      home_ = nullptr;
    } else {
      ctx.give_back(tensor_);
    }
  }

 private:
  dnnl::memory::desc md_;
  Tensor tensor_;
  LeasedTensor* home_ = nullptr;  // whose storage tensor_ borrows
  bool lent_ = false;             // tensor_'s storage is lent to another
};

class Layer {
 public:
  Layer() = default;
  Layer(Layer&&) = default;
  Layer& operator=(Layer&&) = default;
  virtual ~Layer() = default;

  // One line for the model summary, e.g. "conv2d 3->32 k3 s1 p1 +relu".
  virtual std::string describe() const = 0;

  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  // Called once, after the model allocated its flat buffers: one view per ParamSpec, in order.
  virtual void bind(const std::vector<ParamView>& /*views*/, Context& /*ctx*/) {}

  // Builds the primitives for this input descriptor and mode, returns the output descriptor. The input
  // layout is what the previous layer produced; the output layout is this layer's (or oneDNN's) choice.
  // need_diff_src is false for the first layer: no gradient w.r.t. the input images is computed.
  virtual dnnl::memory::desc setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) = 0;
  // src must stay alive until backward where backward_reads_input(). The output returned stays valid until
  // the next forward, or until the enclosing model or block gives it back (release_output).
  virtual const Tensor& forward(Context& ctx, const Tensor& src) = 0;
  // diff_dst has the layout of this layer's output; returns diff_src in the layout of its input (empty
  // when need_diff_src was false), valid until release_gradient. Writes (overwrites, or adds to: see
  // accumulate_gradients) this layer's parameter gradients.
  virtual const Tensor& backward(Context& ctx, const Tensor& diff_dst) = 0;

  virtual std::vector<StateView> state() { return {}; }

  // The value this layer hands past the layers after it to a later one (a Fork), or takes from an earlier
  // one (a Join): see open_block.hpp. Null for other layers.
  virtual std::shared_ptr<SideValue> side_opened() const { return nullptr; }
  virtual std::shared_ptr<SideValue> side_closed() const { return nullptr; }

  // Whether setup() also takes a bf16 input (its input gradient is then bf16 too). Asked after
  // set_output_type(), which some layers' answer depends on.
  virtual bool takes_bf16() const { return false; }
  // The type to give the output in, where the layer can (see choose_output_types); set before setup().
  // A block passes it on to its parts at once, so that its takes_bf16() answers for this setting.
  virtual void set_output_type(const Context& /*ctx*/, dt type) { output_type_ = type; }

  // From now on backward adds to the parameter gradients instead of overwriting them (micro-batches).
  // Returns false when the layer cannot: the model then keeps the old values and adds them back itself.
  virtual bool accumulate_gradients(bool /*on*/) { return false; }

  // The caller of backward is done with the gradient it returned: its storage goes back to the pool.
  virtual void release_gradient(Context& ctx) { diff_src_.give_back(ctx); }

  // Whether this layer's backward reads its output, and its input. Where neither this layer's backward
  // reads its output nor the next layer's its input, the output is dead once the next layer's forward has
  // run, and the enclosing model or block gives it back then (release_output) instead of keeping it
  // until the layer's next forward: a BatchNorm's output before a max-pool, or a projection shortcut's
  // once the residual sum has read it. The defaults keep it.
  virtual bool backward_reads_output() const { return true; }
  virtual bool backward_reads_input() const { return true; }
  virtual void release_output(Context& ctx) { output_.give_back(ctx); }
  // Gives back what forward leased and backward would read, the output and a block's inner outputs: a
  // model that recomputes activations (Model::recompute_activations) calls it inside a segment and runs the
  // forward again before backward. Tensors a layer owns (attention's scores) stay.
  virtual void release_activations(Context& ctx) { release_output(ctx); }

  // Whether this layer's output is a fused ReLU's (a convolution's post-op), and whether this layer can
  // apply that ReLU's backward for the layer before it (a max-pool): see move_relu_backward_into_pools.
  virtual bool ends_in_relu() const { return false; }
  virtual bool can_take_relu_backward() const { return false; }
  // Set before setup() by the enclosing model or block, on such a pair.
  void set_relu_backward_in_next(bool moved) { relu_backward_in_next_ = moved; }
  void set_relu_backward_of_previous(bool moved) { relu_backward_of_previous_ = moved; }

  // Whether backward may overwrite its diff_dst: true where that gradient is another layer's, given up
  // once consumed, not the caller's nor shared with a second path. A fused ReLU's backward then works in
  // place instead of in a buffer the size of the output. Set before setup() by the enclosing model or block.
  void set_may_overwrite_diff_dst(bool may) { may_overwrite_diff_dst_ = may; }

 protected:
  LeasedTensor diff_src_;
  // The output, where a layer leases it (most do): kept for backward, and read by the next layer's.
  LeasedTensor output_;
  // At set-up: an input gradient still borrowing the output's storage gives it back, and the output its
  // storage to the pool, before the output takes its new descriptor.
  void reset_output(Context& ctx, const dnnl::memory::desc& md) {
    diff_src_.give_back(ctx);
    output_.give_back(ctx);
    output_.reset(md);
  }
  dt output_type_ = dt::f32;
  bool may_overwrite_diff_dst_ = false;
  bool relu_backward_in_next_ = false;      // the next layer applies this layer's ReLU backward
  bool relu_backward_of_previous_ = false;  // this layer applies the previous layer's ReLU backward
};

// Tells each layer of a chain the type to give its output in, last first: bf16 where `ctx` computes in
// bf16 and the next layer takes it, so the activations between such layers, and their gradients, stay
// bf16 (half the bytes written, read and kept for backward); `last` for the chain's last layer.
template <typename Layers>
void choose_output_types(const Context& ctx, Layers& layers, dt last) {
  dt next = last;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    (*it)->set_output_type(ctx, next);
    next = ctx.compute_type() == dt::bf16 && (*it)->takes_bf16() ? dt::bf16 : dt::f32;
  }
}

// Where a convolution's fused ReLU feeds a max-pool, the pool applies the ReLU's backward, to its own output
// gradient: relu(max x) = max relu(x), so each window's gradient reaches only its maximum, whose ReLU passed
// it exactly where the pooled value is positive. Overlapping windows too: the windows that share a maximum
// element all pooled its value. That is one pass over the pool's output instead of one over the 4x larger
// convolution output, which then no backward reads: it is given back once the pool has read it.
template <typename Layers>
void move_relu_backward_into_pools(Layers& layers) {
  bool previous_moved = false;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const bool moved = i + 1 < layers.size() && layers[i]->ends_in_relu() && layers[i + 1]->can_take_relu_backward();
    layers[i]->set_relu_backward_in_next(moved);
    layers[i]->set_relu_backward_of_previous(previous_moved);
    previous_moved = moved;
  }
}

// After `next` has run its forward on `layer`'s output: gives that output back where no backward reads it.
inline void release_unread_output(Context& ctx, Layer& layer, const Layer& next) {
  if (!layer.backward_reads_output() && !next.backward_reads_input()) layer.release_output(ctx);
}

// After a layer's backward, once the caller has consumed its input gradient (layer i's gradient is
// consumed by layer i - 1's backward): the gradient goes back to the pool, and with it the output, which
// the layer's backward and the next layer's, its readers, have read. So the outputs of the layers already
// through backward make room for the gradients of those still to come (VGG16's conv1 gradients, 400 MB
// in bf16, fit in its deeper layers' outputs). `output_too` is false for a block's or model's last layer,
// whose output is the block's own and stays valid until the next forward.
inline void release_after_backward(Context& ctx, Layer& layer, bool output_too) {
  layer.release_gradient(ctx);
  if (output_too) layer.release_output(ctx);
}

// Binds each part of a block to its share of `views`, in order: a part takes as many views as it has specs.
inline void bind_in_order(const std::vector<Layer*>& parts, const std::vector<ParamView>& views, Context& ctx) {
  std::size_t next = 0;
  for (Layer* part : parts) {
    const std::size_t n = part->param_specs().size();
    part->bind(std::vector<ParamView>(views.begin() + next, views.begin() + next + n), ctx);
    next += n;
  }
}

}  // namespace ddl
