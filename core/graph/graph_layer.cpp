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
  give_back_values(ctx);
  const dims_t in = dims_of(src);
  input_dims_ = in;
  train_ = mode == Mode::train;
  need_diff_src_ = train_ && need_diff_src;
  storage_.clear();
  storage_.resize(ops_.size());
  output_grads_.clear();
  output_grads_.resize(ops_.size());

  in_place_ = src == plain_desc(in);
  if (!in_place_) to_plain_ = Copy(ctx, src, plain_desc(in));
  if (need_diff_src_ && !in_place_) to_src_layout_ = Copy(ctx, plain_desc(in), src);
  diff_src_.give_back(ctx);  // a gradient still out goes back to the pool, not only out of reach
  diff_src_.reset(need_diff_src_ ? src : dnnl::memory::desc());
  const std::int64_t batch = lay_out_values(in);
  largest_ = product(in);
  for (const OpValue& v : values_) largest_ = std::max(largest_, product(v.dims));
  plan_storage();
  const dims_t out = ends_.hands_on.empty() ? values_.back().dims
                                            : dims_t{batch, static_cast<dnnl::memory::dim>(handed_numbers_) / batch};
  reset_output(ctx, plain_desc(out));
  for (std::size_t k = 0; k < ops_.size(); ++k) ops_[k]->setup(ctx, inputs_[k], values_[first_op() + k], train_);
  return output_.desc();
}

void GraphLayer::check_shapes(const dims_t& in) { lay_out_values(in); }

std::int64_t GraphLayer::lay_out_values(const dims_t& in) {
  values_.assign(first_op() + ops_.size(), OpValue{});
  needs_grad_.assign(values_.size(), false);
  const std::int64_t batch = take_inputs(in);
  for (std::size_t i = 0; i < input_count(); ++i) needs_grad_[i] = need_diff_src_;
  const std::size_t first_param = input_count();
  for (std::size_t p = 0; p < params_.size(); ++p) {
    const bool bound = p < views_.size();  // not yet where the importer checks the shapes
    values_[first_param + p] = {params_[p].dims, bound ? views_[p].value.data() : nullptr,
                                bound && train_ ? views_[p].grad.data() : nullptr, false};
    needs_grad_[first_param + p] = train_;
  }
  for (std::size_t c = 0; c < constants_.size(); ++c)
    values_[first_param + params_.size() + c] = {constants_[c].dims, constants_[c].values.data(), nullptr, true};
  infer_dims(batch);
  return batch;
}

std::int64_t GraphLayer::take_inputs(const dims_t& in) {
  if (ends_.takes.empty()) {
    if (static_cast<std::size_t>(batch_.axis) >= in.size() || in[batch_.axis] % batch_.per_batch != 0)
      throw InputError("graph layer: its input " + to_string(in) + " has no batch on axis " +
                       std::to_string(batch_.axis));
    values_[0].dims = in;
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
    values_[i].dims = ends_.takes[i].dims;
    values_[i].dims[ends_.takes[i].batch_axis] *= batch;
    input_offsets_.push_back(offset);
    offset += product(values_[i].dims);
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
  if (handed_numbers_ % static_cast<std::size_t>(batch) != 0)
    ops_.back()->spec().fail("hands on values of " + std::to_string(handed_numbers_) +
                             " numbers, not a multiple of the batch");
}

void GraphLayer::plan_storage() {
  root_.resize(values_.size());
  for (std::size_t v = 0; v < first_op(); ++v) root_[v] = static_cast<int>(v);
  place_.assign(ops_.size(), Place::own);
  place_offset_.assign(ops_.size(), 0);
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const int number = static_cast<int>(first_op() + k);
    root_[number] = number;
    const auto handed = std::find(ends_.hands_on.begin(), ends_.hands_on.end(), number);
    const bool last = k + 1 == ops_.size() && ends_.hands_on.empty();
    if (ops_[k]->aliases_input(inputs_[k]) && !last && inputs_[k][0]) {  // the same numbers: no copy
      place_[k] = Place::alias;
      root_[number] = root_[ops_[k]->spec().inputs[0]];
    } else if (last || handed != ends_.hands_on.end()) {
      place_[k] = Place::output;
      if (!last) place_offset_[k] = output_offsets_[handed - ends_.hands_on.begin()];
    }
  }
  // A value is read back where the backward of an operator that runs it reads it (the backward runs where
  // a gradient reaches the operator's output).
  read_back_.assign(values_.size(), false);
  for (std::size_t k = 0; train_ && k < ops_.size(); ++k) {
    if (!needs_grad_[first_op() + k]) continue;
    const auto& reads = ops_[k]->spec().inputs;
    std::vector<bool> wanted;
    for (const int i : reads) wanted.push_back(i >= 0 && needs_grad_[i]);
    for (std::size_t i = 0; i < reads.size(); ++i)
      if (reads[i] >= 0 && ops_[k]->backward_reads_input(i, wanted)) read_back_[root_[reads[i]]] = true;
    if (ops_[k]->backward_reads_output(wanted)) read_back_[root_[first_op() + k]] = true;
  }
  input_read_back_ = false;
  for (std::size_t i = 0; i < input_count(); ++i) input_read_back_ = input_read_back_ || read_back_[i];
  output_read_back_ = false;
  for (std::size_t k = 0; k < ops_.size(); ++k)
    if (place_[k] == Place::output) output_read_back_ = output_read_back_ || read_back_[first_op() + k];
  // Forward is done with a value of its own storage that no backward reads after the last operator that
  // reads it (or after the values handed on are copied out).
  given_back_after_.assign(ops_.size() + 1, {});
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    const int number = static_cast<int>(first_op() + k);
    if (place_[k] == Place::own && !read_back_[number]) give_back_after(k, number);
  }
}

void GraphLayer::give_back_after(std::size_t k, int root) {
  std::size_t last = k;
  for (std::size_t r = k + 1; r < ops_.size(); ++r)
    for (const int i : ops_[r]->spec().inputs)
      if (i >= 0 && root_[i] == root) last = r;
  for (const int v : ends_.hands_on)
    if (root_[v] == root) last = ops_.size();
  given_back_after_[last].push_back(root);
}

void GraphLayer::point_inputs(Context& ctx, const Tensor& src) {
  // In place: what forward writes goes to the operators' outputs, never to their inputs.
  float* base = const_cast<float*>(src.data());
  if (!in_place_) {
    input_copy_ = ctx.lease(plain_desc(input_dims_));
    (*to_plain_)(ctx, src.memory(), input_copy_.memory());
    base = input_copy_.data();
  }
  for (std::size_t i = 0; i < input_count(); ++i) values_[i].data = base + input_offsets_[i];
}

const Tensor& GraphLayer::forward(Context& ctx, const Tensor& src) {
  give_back_values(ctx);  // what a forward whose backward did not run still holds
  point_inputs(ctx, src);
  Tensor& out = output_.get(ctx);
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    OpValue& v = values_[first_op() + k];
    if (place_[k] == Place::alias) {
      v.data = inputs_[k][0]->data;
    } else if (place_[k] == Place::output) {
      v.data = out.data() + place_offset_[k];
    } else {
      storage_[k] = ctx.lease(plain_desc({static_cast<dnnl::memory::dim>(product(v.dims))}));
      v.data = storage_[k].data();
    }
    ops_[k]->forward(ctx, inputs_[k], v);
    for (const int root : given_back_after_[k]) give_back_root(ctx, root);
  }
  // A value handed on that is not computed in its place (an input's, an alias's) is copied there.
  for (std::size_t j = 0; j < ends_.hands_on.size(); ++j)
    if (const int v = ends_.hands_on[j]; v < static_cast<int>(first_op()) || place_[v - first_op()] != Place::output)
      std::memcpy(out.data() + output_offsets_[j], values_[v].data, product(values_[v].dims) * sizeof(float));
  for (const int root : given_back_after_[ops_.size()]) give_back_root(ctx, root);
  if (!input_read_back_ && !input_copy_.empty()) ctx.give_back(input_copy_);
  return out;
}

void GraphLayer::give_back_root(Context& ctx, int root) {
  ctx.give_back(storage_[root - first_op()]);
  for (std::size_t v = first_op(); v < values_.size(); ++v)
    if (root_[v] == root) values_[v].data = nullptr;  // an operator that reads it after this is a fault
}

void GraphLayer::give_back_values(Context& ctx) {
  for (Tensor& t : storage_)
    if (!t.empty()) ctx.give_back(t);
  if (!input_copy_.empty()) ctx.give_back(input_copy_);
}

void GraphLayer::give_back_gradients(Context& ctx) {
  for (Tensor* t : {&input_grad_, &scratch_})
    if (!t->empty()) ctx.give_back(*t);
  for (std::size_t i = 0; i < input_count(); ++i) values_[i].grad = nullptr;
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    if (!output_grads_[k].empty()) ctx.give_back(output_grads_[k]);
    values_[first_op() + k].grad = nullptr;
  }
}

void GraphLayer::lease_gradient(Context& ctx, std::size_t k) {
  OpValue& value = values_[first_op() + k];
  if (value.grad) return;
  if (place_[k] == Place::alias) {  // the same numbers: their gradient too, so the operator's backward is none
    const int root = root_[first_op() + k];
    if (root >= static_cast<int>(first_op())) lease_gradient(ctx, root - first_op());
    value.grad = values_[root].grad;
    return;
  }
  output_grads_[k] = ctx.lease(plain_desc({static_cast<dnnl::memory::dim>(product(value.dims))}));
  std::memset(output_grads_[k].data(), 0, output_grads_[k].bytes());
  value.grad = output_grads_[k].data();
}

const Tensor& GraphLayer::backward(Context& ctx, const Tensor& diff_dst) {
  if (!train_) throw Error("graph layer: backward after a set-up for inference");
  if (!accumulate_)
    for (const ParamView& view : views_) std::fill(view.grad.begin(), view.grad.end(), 0.0f);
  // The gradients and what forward kept go back to the pool for the layers whose backward comes next, also
  // when a step throws.
  struct GiveBack {
    GraphLayer& layer;
    Context& ctx;
    ~GiveBack() {
      layer.give_back_gradients(ctx);
      layer.give_back_values(ctx);
    }
  } give_back{*this, ctx};
  if (need_diff_src_) {
    Tensor& grad = in_place_ ? diff_src_.get(ctx) : (input_grad_ = ctx.lease(plain_desc(input_dims_)));
    std::memset(grad.data(), 0, grad.bytes());
    for (std::size_t i = 0; i < input_count(); ++i) values_[i].grad = grad.data() + input_offsets_[i];
  }
  scratch_ = ctx.lease(plain_desc({static_cast<dnnl::memory::dim>(largest_)}));
  // The output's gradient, or those of the values handed on (a value handed on may also be read here: its
  // gradient is the sum of both).
  const float* from = diff_dst.data();
  const auto seed = [&](int v, const float* g) {
    if (!needs_grad_[v]) return;
    if (static_cast<std::size_t>(v) >= first_op()) lease_gradient(ctx, v - first_op());
    for (std::size_t e = 0, n = product(values_[v].dims); e < n; ++e) values_[v].grad[e] += g[e];
  };
  if (ends_.hands_on.empty()) seed(static_cast<int>(values_.size() - 1), from);
  for (std::size_t j = 0; j < ends_.hands_on.size(); ++j) seed(ends_.hands_on[j], from + output_offsets_[j]);
  for (std::size_t k = ops_.size(); k-- > 0;) {
    if (output_grads_[k].empty()) continue;  // no gradient reached its output, or it is its input's
    for (const int i : ops_[k]->spec().inputs)
      if (i >= static_cast<int>(first_op()) && needs_grad_[i]) lease_gradient(ctx, i - first_op());
    ops_[k]->backward(ctx, inputs_[k], values_[first_op() + k], scratch_.data());
    ctx.give_back(output_grads_[k]);
    values_[first_op() + k].grad = nullptr;
  }
  if (need_diff_src_ && !in_place_) (*to_src_layout_)(ctx, input_grad_.memory(), diff_src_.get(ctx).memory());
  return diff_src_.current();
}

}  // namespace ddl
