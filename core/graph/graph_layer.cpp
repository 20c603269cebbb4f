#include "core/graph/graph_layer.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "core/graph/operator_registry.hpp"
#include "core/rng.hpp"

namespace ddl {

GraphLayer::GraphLayer(std::vector<ParamSpec> params, std::vector<GraphConstant> constants, std::vector<OpSpec> ops,
                       BatchAxis batch, std::uint64_t seed)
    : params_(std::move(params)), constants_(std::move(constants)), batch_(batch) {
  if (batch_.axis < 0 || batch_.per_batch < 1) throw Error("graph layer: a batch axis below 0 or a multiple below 1");
  if (ops.empty()) throw Error("graph layer: no operator");
  std::size_t known = first_op();
  for (OpSpec& spec : ops) {
    for (const int in : spec.inputs)
      if (in >= static_cast<int>(known)) spec.fail("reads a later value");
    ops_.push_back(make_operator(std::move(spec)));
    ++known;
  }
  // Each random operator its own stream: adding one does not change the others' draws.
  for (std::size_t k = 0; k < ops_.size(); ++k)
    if (const auto state = ops_[k]->generator_state(); !state.empty()) {
      const Rng::State drawn = Rng::derived(seed, k).state();
      std::copy(drawn.begin(), drawn.end(), state.begin());
    }
}

std::vector<StateView> GraphLayer::state() {
  std::vector<StateView> views;
  for (std::size_t c = 0; c < constants_.size(); ++c)
    if (constants_[c].running) views.push_back({"constant" + std::to_string(c), constants_[c].values, {}});
  for (std::size_t k = 0; k < ops_.size(); ++k)
    if (const auto state = ops_[k]->generator_state(); !state.empty())
      views.push_back({"op" + std::to_string(k) + ".rng", {}, state});
  return views;
}

std::string GraphLayer::describe() const {
  std::map<std::string, int> counts;
  for (const auto& op : ops_) ++counts[op->spec().type];
  std::string s = "graph of " + std::to_string(ops_.size()) + " operators (";
  for (const auto& [name, count] : counts) s += name + " " + std::to_string(count) + ", ";
  s.resize(s.size() - 2);
  return s + ")";
}

void GraphLayer::bind(const std::vector<ParamView>& views, Context& /*ctx*/) { views_ = views; }


dnnl::memory::desc GraphLayer::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  if (views_.size() != params_.size()) throw Error("graph layer: set up before its parameters were bound");
  const dims_t in = dims_of(src);
  train_ = mode == Mode::train;
  need_diff_src_ = train_ && need_diff_src;
  values_.assign(first_op() + ops_.size(), OpValue{});
  outputs_.clear();
  outputs_.resize(ops_.size());
  output_grads_.clear();
  output_grads_.resize(ops_.size());

  input_ = Tensor(plain_desc(in), ctx.engine());
  to_plain_ = Copy(ctx, src, input_.desc());
  values_[0] = {in, input_.data(), nullptr, false};
  needs_grad_.assign(values_.size(), false);
  needs_grad_[0] = need_diff_src_;
  if (need_diff_src_) to_src_layout_ = Copy(ctx, input_.desc(), src);
  diff_src_.reset(need_diff_src_ ? src : dnnl::memory::desc());
  for (std::size_t p = 0; p < params_.size(); ++p) {
    values_[1 + p] = {params_[p].dims, views_[p].value.data(), train_ ? views_[p].grad.data() : nullptr, false};
    needs_grad_[1 + p] = train_;
  }
  for (std::size_t c = 0; c < constants_.size(); ++c)
    values_[1 + params_.size() + c] = {constants_[c].dims, constants_[c].values.data(), nullptr, true};

  if (static_cast<std::size_t>(batch_.axis) >= in.size() || in[batch_.axis] % batch_.per_batch != 0)
    throw InputError("graph layer: its input " + to_string(in) + " has no batch on axis " + std::to_string(batch_.axis));
  const std::int64_t batch = in[batch_.axis] / batch_.per_batch;
  std::size_t largest = product(in);
  inputs_.assign(ops_.size(), {});
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    Operator& op = *ops_[k];
    for (const int i : op.spec().inputs) inputs_[k].push_back(i < 0 ? nullptr : &values_[i]);
    const auto& inputs = inputs_[k];
    dims_t out;
    // The shape rules say what does not fit; the node is named here, once for every operator.
    try {
      out = op.output_dims(inputs, batch);
      // A damaged file's shape can be anything: each dimension positive, and the whole within 2^40 values.
      shapes::count(out);
    } catch (const shapes::ShapeError& e) {
      op.spec().fail(e.what());
    }
    if (product(out) == 0) op.spec().fail("gives a tensor of dims " + to_string(out));
    const bool last = k + 1 == ops_.size();
    if (last && (out.empty() || out.size() > 5))
      op.spec().fail("ends the piece with a tensor of rank " + std::to_string(out.size()));
    OpValue& v = values_[first_op() + k];
    if (op.aliases_input(inputs) && !last && inputs[0]) {  // the same numbers: its input's storage, no copy
      v = {out, inputs[0]->data, nullptr, false};
    } else {
      outputs_[k] = Tensor(plain_desc(last ? out : dims_t{static_cast<dnnl::memory::dim>(product(out))}), ctx.engine());
      v = {out, outputs_[k].data(), nullptr, false};
    }
    const auto& reads = op.spec().inputs;
    needs_grad_[first_op() + k] = std::any_of(reads.begin(), reads.end(), [&](int i) { return i >= 0 && needs_grad_[i]; });
    largest = std::max(largest, product(out));
    for (const OpValue* input : inputs)
      if (input) largest = std::max(largest, product(input->dims));
    op.setup(ctx, inputs, v, train_);
  }
  scratch_.assign(train_ ? largest : 0, 0.0f);
  return outputs_.back().desc();
}

const Tensor& GraphLayer::forward(Context& ctx, const Tensor& src) {
  (*to_plain_)(ctx, src.memory(), input_.memory());
  for (std::size_t k = 0; k < ops_.size(); ++k) ops_[k]->forward(ctx, inputs_[k], values_[first_op() + k]);
  return outputs_.back();
}

void GraphLayer::give_back_gradients(Context& ctx) {
  const auto give = [&](Tensor& grad, OpValue& value) {
    if (!grad.empty()) ctx.give_back(grad);
    value.grad = nullptr;
  };
  give(input_grad_, values_[0]);
  for (std::size_t k = 0; k < ops_.size(); ++k) give(output_grads_[k], values_[first_op() + k]);
}

const Tensor& GraphLayer::backward(Context& ctx, const Tensor& diff_dst) {
  if (!train_) throw Error("graph layer: backward after a set-up for inference");
  if (!accumulate_)
    for (const ParamView& view : views_) std::fill(view.grad.begin(), view.grad.end(), 0.0f);
  const auto lease = [&](Tensor& grad, OpValue& value, const dnnl::memory::desc& md) {
    grad = ctx.lease(md);
    std::memset(grad.data(), 0, grad.bytes());
    value.grad = grad.data();
  };
  if (need_diff_src_) lease(input_grad_, values_[0], input_.desc());
  for (std::size_t k = 0; k < ops_.size(); ++k)
    if (OpValue& value = values_[first_op() + k]; needs_grad_[first_op() + k])
      lease(output_grads_[k], value, plain_desc({static_cast<dnnl::memory::dim>(product(value.dims))}));
  if (!output_grads_.back().empty())
    std::memcpy(output_grads_.back().data(), diff_dst.data(), product(values_.back().dims) * sizeof(float));
  // The gradients go back to the pool for the layers whose backward comes next, also when a step throws.
  struct GiveBack {
    GraphLayer& layer;
    Context& ctx;
    ~GiveBack() { layer.give_back_gradients(ctx); }
  } give_back{*this, ctx};
  for (std::size_t k = ops_.size(); k-- > 0;)
    if (!output_grads_[k].empty()) ops_[k]->backward(ctx, inputs_[k], values_[first_op() + k], scratch_.data());
  if (need_diff_src_) (*to_src_layout_)(ctx, input_grad_.memory(), diff_src_.get(ctx).memory());
  return diff_src_.current();
}

}  // namespace ddl
