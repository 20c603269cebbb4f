#include "core/graph/graph_layer.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "core/graph/operator_registry.hpp"
#include "core/rng.hpp"

namespace ddl {

GraphLayer::GraphLayer(std::vector<ParamSpec> params, std::vector<GraphConstant> constants, std::vector<OpSpec> ops,
                       BatchAxis batch, std::uint64_t seed, GraphEnds ends)
    : params_(std::move(params)), constants_(std::move(constants)), batch_(batch), ends_(std::move(ends)) {
  if (batch_.axis < 0 || batch_.per_batch < 1) throw Error("graph layer: a batch axis below 0 or a multiple below 1");
  if (ops.empty()) throw Error("graph layer: no operator");
  for (const CrossingValue& v : ends_.takes)
    if (v.batch_axis < 0 || static_cast<std::size_t>(v.batch_axis) >= v.dims.size() || product(v.dims) == 0)
      throw Error("graph layer: a value taken in has no batch axis or no numbers");
  for (const int v : ends_.hands_on)
    if (v < 0 || static_cast<std::size_t>(v) >= first_op() + ops.size())
      throw Error("graph layer: it hands on a value it does not have");
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
  s += ")";
  if (!ends_.takes.empty()) s += ", takes " + std::to_string(ends_.takes.size()) + " values";
  if (!ends_.hands_on.empty()) s += ", hands on " + std::to_string(ends_.hands_on.size()) + " values";
  return s;
}

void GraphLayer::bind(const std::vector<ParamView>& views, Context& /*ctx*/) { views_ = views; }


dnnl::memory::desc GraphLayer::setup(Context& ctx, const dnnl::memory::desc& src, Mode mode, bool need_diff_src) {
  if (views_.size() != params_.size()) throw Error("graph layer: set up before its parameters were bound");
  const dims_t in = dims_of(src);
  train_ = mode == Mode::train;
  need_diff_src_ = train_ && need_diff_src;
  values_.assign(first_op() + ops_.size(), OpValue{});
  needs_grad_.assign(values_.size(), false);
  outputs_.clear();
  outputs_.resize(ops_.size());
  output_grads_.clear();
  output_grads_.resize(ops_.size());

  input_ = Tensor(plain_desc(in), ctx.engine());
  to_plain_ = Copy(ctx, src, input_.desc());
  if (need_diff_src_) to_src_layout_ = Copy(ctx, input_.desc(), src);
  diff_src_.reset(need_diff_src_ ? src : dnnl::memory::desc());
  const std::int64_t batch = take_inputs(in);
  for (std::size_t i = 0; i < input_count(); ++i) needs_grad_[i] = need_diff_src_;
  const std::size_t first_param = input_count();
  for (std::size_t p = 0; p < params_.size(); ++p) {
    values_[first_param + p] = {params_[p].dims, views_[p].value.data(), train_ ? views_[p].grad.data() : nullptr,
                                false};
    needs_grad_[first_param + p] = train_;
  }
  for (std::size_t c = 0; c < constants_.size(); ++c)
    values_[first_param + params_.size() + c] = {constants_[c].dims, constants_[c].values.data(), nullptr, true};

  infer_dims(batch);
  std::size_t largest = product(in);
  for (const OpValue& v : values_) largest = std::max(largest, product(v.dims));
  scratch_.assign(train_ ? largest : 0, 0.0f);
  place_outputs(ctx);
  return ends_.hands_on.empty() ? outputs_.back().desc() : handed_.desc();
}

std::int64_t GraphLayer::take_inputs(const dims_t& in) {
  if (ends_.takes.empty()) {
    if (static_cast<std::size_t>(batch_.axis) >= in.size() || in[batch_.axis] % batch_.per_batch != 0)
      throw InputError("graph layer: its input " + to_string(in) + " has no batch on axis " +
                       std::to_string(batch_.axis));
    values_[0] = {in, input_.data(), nullptr, false};
    input_offsets_ = {0};
    return in[batch_.axis] / batch_.per_batch;
  }
  std::size_t per_image = 0;
  for (const CrossingValue& v : ends_.takes) per_image += product(v.dims);
  if (in.size() != 2 || static_cast<std::size_t>(in[1]) != per_image)
    throw InputError("graph layer: its input " + to_string(in) + " does not hold the " +
                     std::to_string(ends_.takes.size()) + " values it takes (" + std::to_string(per_image) +
                     " numbers an image)");
  const std::int64_t batch = in[0];
  input_offsets_.clear();
  std::size_t offset = 0;
  for (std::size_t i = 0; i < ends_.takes.size(); ++i) {
    dims_t dims = ends_.takes[i].dims;
    dims[ends_.takes[i].batch_axis] *= batch;
    values_[i] = {dims, input_.data() + offset, nullptr, false};
    input_offsets_.push_back(offset);
    offset += product(dims);
  }
  return batch;
}

void GraphLayer::infer_dims(std::int64_t batch) {
  inputs_.assign(ops_.size(), {});
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const Operator& op = *ops_[k];
    for (const int i : op.spec().inputs) inputs_[k].push_back(i < 0 ? nullptr : &values_[i]);
    dims_t out;
    // The shape rules say what does not fit; the node is named here, once for every operator.
    try {
      out = op.output_dims(inputs_[k], batch);
      // A damaged file's shape can be anything: each dimension positive, and the whole within 2^40 values.
      shapes::count(out);
    } catch (const shapes::ShapeError& e) {
      op.spec().fail(e.what());
    }
    if (product(out) == 0) op.spec().fail("gives a tensor of dims " + to_string(out));
    if (k + 1 == ops_.size() && ends_.hands_on.empty() && (out.empty() || out.size() > 5))
      op.spec().fail("ends the piece with a tensor of rank " + std::to_string(out.size()));
    values_[first_op() + k].dims = out;
    const auto& reads = op.spec().inputs;
    needs_grad_[first_op() + k] =
        std::any_of(reads.begin(), reads.end(), [&](int i) { return i >= 0 && needs_grad_[i]; });
  }
  output_offsets_.clear();
  handed_numbers_ = 0;
  for (const int v : ends_.hands_on) {
    output_offsets_.push_back(handed_numbers_);
    handed_numbers_ += product(values_[v].dims);
  }
  batch_size_ = batch;
  if (handed_numbers_ % static_cast<std::size_t>(batch) != 0)
    ops_.back()->spec().fail("hands on values of " + std::to_string(handed_numbers_) +
                             " numbers, not a multiple of the batch");
}

void GraphLayer::place_outputs(Context& ctx) {
  handed_ = Tensor();
  if (!ends_.hands_on.empty())
    handed_ =
        Tensor(plain_desc({batch_size_, static_cast<dnnl::memory::dim>(handed_numbers_) / batch_size_}), ctx.engine());
  handed_in_place_.assign(ends_.hands_on.size(), false);
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    Operator& op = *ops_[k];
    const auto& inputs = inputs_[k];
    const std::size_t number = first_op() + k;
    OpValue& v = values_[number];
    const bool last = k + 1 == ops_.size() && ends_.hands_on.empty();
    const auto handed = std::find(ends_.hands_on.begin(), ends_.hands_on.end(), static_cast<int>(number));
    if (op.aliases_input(inputs) && !last && inputs[0]) {  // the same numbers: its input's storage, no copy
      v.data = inputs[0]->data;
    } else if (handed != ends_.hands_on.end()) {
      const std::size_t j = handed - ends_.hands_on.begin();
      v.data = handed_.data() + output_offsets_[j];
      handed_in_place_[j] = true;
    } else {
      outputs_[k] =
          Tensor(plain_desc(last ? v.dims : dims_t{static_cast<dnnl::memory::dim>(product(v.dims))}), ctx.engine());
      v.data = outputs_[k].data();
    }
    op.setup(ctx, inputs, v, train_);
  }
}

const Tensor& GraphLayer::forward(Context& ctx, const Tensor& src) {
  (*to_plain_)(ctx, src.memory(), input_.memory());
  for (std::size_t k = 0; k < ops_.size(); ++k) ops_[k]->forward(ctx, inputs_[k], values_[first_op() + k]);
  if (ends_.hands_on.empty()) return outputs_.back();
  for (std::size_t j = 0; j < ends_.hands_on.size(); ++j)
    if (!handed_in_place_[j]) {
      const OpValue& v = values_[ends_.hands_on[j]];
      std::memcpy(handed_.data() + output_offsets_[j], v.data, product(v.dims) * sizeof(float));
    }
  return handed_;
}

void GraphLayer::give_back_gradients(Context& ctx) {
  const auto give = [&](Tensor& grad, OpValue& value) {
    if (!grad.empty()) ctx.give_back(grad);
    value.grad = nullptr;
  };
  give(input_grad_, values_[0]);
  for (std::size_t i = 1; i < input_count(); ++i) values_[i].grad = nullptr;
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
  if (need_diff_src_) {
    lease(input_grad_, values_[0], input_.desc());
    for (std::size_t i = 1; i < input_count(); ++i) values_[i].grad = input_grad_.data() + input_offsets_[i];
  }
  for (std::size_t k = 0; k < ops_.size(); ++k)
    if (OpValue& value = values_[first_op() + k]; needs_grad_[first_op() + k])
      lease(output_grads_[k], value, plain_desc({static_cast<dnnl::memory::dim>(product(value.dims))}));
  if (ends_.hands_on.empty() && !output_grads_.back().empty())
    std::memcpy(output_grads_.back().data(), diff_dst.data(), product(values_.back().dims) * sizeof(float));
  // A value handed on may also be read here: its gradient is the sum of both.
  for (std::size_t j = 0; j < ends_.hands_on.size(); ++j)
    if (const OpValue& v = values_[ends_.hands_on[j]]; v.grad) {
      const float* from = diff_dst.data() + output_offsets_[j];
      for (std::size_t e = 0, n = product(v.dims); e < n; ++e) v.grad[e] += from[e];
    }
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
