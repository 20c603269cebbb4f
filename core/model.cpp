#include "core/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "core/initializer.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/param_slice.hpp"
#include "core/layers/split_dense.hpp"
#include "core/layers/split_linear.hpp"
#include "core/recompute_segments.hpp"

namespace ddl {
namespace {

dims_t with_batch(dnnl::memory::dim n, const dims_t& per_image) {
  dims_t d{n};
  d.insert(d.end(), per_image.begin(), per_image.end());
  return d;
}

dims_t per_image(const dnnl::memory::desc& md) {
  dims_t d = dims_of(md);
  d.erase(d.begin());
  return d;
}

// `t`, leased for `md` unless it already is.
Tensor& held(Context& ctx, Tensor& t, const dnnl::memory::desc& md) {
  if (!t.empty() && t.desc() != md) ctx.give_back(t);
  if (t.empty()) t = ctx.lease(md);
  return t;
}

// Copies values into or out of a packed tensor: each in full at `at` numbers in, which it moves past.
class PackedValues {
 public:
  PackedValues(Context& ctx, const Tensor& packed) : ctx_(ctx), packed_(packed), n_(dims_of(packed.desc())[0]) {}
  void put(const Tensor& from, const dims_t& per_image) { reorder(from.memory(), next(per_image)); }
  void take(Tensor& to, const dims_t& per_image) { reorder(next(per_image), to.memory()); }

 private:
  dnnl::memory next(const dims_t& per_image) {
    const dims_t dims = with_batch(n_, per_image);
    dnnl::memory part(plain_desc(dims), ctx_.engine(), const_cast<float*>(packed_.data()) + at_);
    at_ += product(dims);
    return part;
  }
  void reorder(dnnl::memory from, dnnl::memory to) { dnnl::reorder(from, to).execute(ctx_.stream(), from, to); }

  Context& ctx_;
  const Tensor& packed_;
  dnnl::memory::dim n_;
  std::size_t at_ = 0;
};

}  // namespace

Model::Model(std::string name, dims_t input_shape, int num_classes)
    : name_(std::move(name)), input_shape_(std::move(input_shape)), num_classes_(num_classes) {
  if (input_shape_.size() != 3) throw Error("model " + name_ + ": input shape must be [C, H, W]");
}

void Model::add(std::unique_ptr<Layer> layer, dims_t input_dims) {
  if (finalized_) throw Error("model " + name_ + ": add() after finalize()");
  layers_.push_back(std::move(layer));
  input_dims_.push_back(std::move(input_dims));
}

std::vector<std::shared_ptr<SideValue>> Model::sides_crossing(std::size_t i) const {
  if (whole_layers_ != 0 && whole_layers_ != layers_.size())
    throw Error("model " + name_ + ": side values are found in the whole model, not a stage");
  std::vector<std::shared_ptr<SideValue>> crossing;
  for (std::size_t fork = 0; fork < i && fork < layers_.size(); ++fork)
    if (const auto side = layers_[fork]->side_opened())
      for (std::size_t join = i; join < layers_.size(); ++join)
        if (layers_[join]->side_closed() == side) {
          crossing.push_back(side);
          break;
        }
  return crossing;
}

double Model::side_bytes_after(std::size_t i) const {
  double bytes = 0;
  for (const auto& side : sides_crossing(i + 1)) bytes += 4.0 * static_cast<double>(product(side->dims));
  return bytes;
}

std::size_t Model::layer_param_count(std::size_t i) const {
  std::size_t n = 0;
  for (const auto& spec : layers_.at(i)->param_specs()) n += whole_size(spec);
  return n;
}

void Model::split_layers(const std::vector<std::size_t>& layers, TensorGroup& group) {
  if (finalized_ || whole_layers_ != 0) throw Error("model " + name_ + ": split_layers() after keep_layers or finalize");
  if (!std::is_sorted(layers.begin(), layers.end()) || std::adjacent_find(layers.begin(), layers.end()) != layers.end())
    throw Error("model " + name_ + ": split_layers() needs ascending indices");
  bool blocks = false;
  for (const std::size_t i : layers) {
    if (i >= layers_.size())
      throw InputError("model " + name_ + " has " + std::to_string(layers_.size()) + " layers, no layer " +
                       std::to_string(i) + " to split");
    if (auto* block = dynamic_cast<Residual*>(layers_[i].get())) {
      split_transformer_block(*block, group);
      blocks = true;
      continue;
    }
    const auto* dense = dynamic_cast<const Dense*>(layers_[i].get());
    if (!dense)
      throw InputError("model " + name_ + ": layer " + std::to_string(i) + " (" + layers_[i]->describe() +
                       ") is neither a dense layer nor a transformer block; only those split across ranks");
    // The first split dense layer gathers the group's batch.
    const bool gathers = batch_gather_layer_ == static_cast<std::size_t>(-1);
    if (gathers) batch_gather_layer_ = i;
    layers_[i] = std::make_unique<SplitDense>(dense->options(), group, gathers);
  }
  // Split blocks need the group to share its batch; split dense layers gather one from every rank.
  if (blocks && batch_gather_layer_ != static_cast<std::size_t>(-1))
    throw InputError("model " + name_ + ": split dense layers or transformer blocks, not both");
}

void Model::keep_layers(std::size_t begin, std::size_t end) {
  if (finalized_) throw Error("model " + name_ + ": keep_layers() after finalize()");
  if (first_layer_ != 0 || whole_layers_ != 0) throw Error("model " + name_ + ": keep_layers() twice");
  if (begin >= end || end > layers_.size())
    throw InputError("model " + name_ + " has " + std::to_string(layers_.size()) + " layers, no range [" +
                     std::to_string(begin) + ", " + std::to_string(end) + ")");
  whole_layers_ = layers_.size();
  incoming_ = sides_crossing(begin);
  outgoing_ = sides_crossing(end);
  if (!incoming_.empty()) {
    if (begin >= input_dims_.size() || input_dims_[begin].empty())
      throw Error("model " + name_ + ": a stage starts at layer " + std::to_string(begin) +
                  ", between a fork and its join, but the dims of its input are not known");
    stage_input_dims_ = input_dims_[begin];
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::size_t n = layer_param_count(i);
    whole_params_ += n;
    if (i < begin) {
      param_offset_ += n;
      first_entry_ += layers_[i]->param_specs().size();
    }
  }
  layers_.erase(layers_.begin() + static_cast<std::ptrdiff_t>(end), layers_.end());
  layers_.erase(layers_.begin(), layers_.begin() + static_cast<std::ptrdiff_t>(begin));
  first_layer_ = begin;
}

void Model::finalize(Context& ctx, Model* share) {
  if (whole_layers_ == 0) whole_layers_ = layers_.size();
  if (share) starting_values_.reset();  // a copy binds to initialised parameters
  std::size_t total = 0, whole = param_offset_;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layer_param_begin_.push_back(total);
    for (const auto& spec : layers_[i]->param_specs()) {
      const std::size_t n = product(spec.dims);
      entries_.push_back(
          {i, std::to_string(first_layer_ + i) + "." + spec.name, spec, total, n, whole});
      total += n;
      whole += whole_size(spec);
    }
  }
  layer_param_begin_.push_back(total);
  if (whole_params_ == 0) whole_params_ = whole;
  std::span<float>& params = params_view_;
  std::span<float>& grads = grads_view_;
  if (share) {
    if (!share->finalized_ || share->param_count() != total || share->first_layer_ != first_layer_)
      throw Error("model " + name_ + ": can share parameters only with a finalized copy of the same stage");
    params = share->params_view_;
    grads = share->grads_view_;
  } else {
    params_ = AlignedBuffer<float>(total);
    grads_ = AlignedBuffer<float>(total);
    params = params_.span();
    grads = grads_.span();
  }
  std::size_t e = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::vector<ParamView> views;
    for (; e < entries_.size() && entries_[e].layer == i; ++e)
      views.push_back({params.subspan(entries_[e].offset, entries_[e].size),
                       grads.subspan(entries_[e].offset, entries_[e].size)});
    layers_[i]->bind(views, ctx);
  }
  resolve_tied_parameters();
  finalized_ = true;
}

void Model::resolve_tied_parameters() {
  tied_.clear();
  for (const auto& group : tied_names_) {
    std::vector<std::size_t> offsets;
    std::size_t size = 0;
    for (const std::string& name : group) {
      const auto e =
          std::find_if(entries_.begin(), entries_.end(), [&](const ParamEntry& p) { return p.name == name; });
      if (e == entries_.end() || e->size != whole_size(e->spec)) continue;  // in another stage, or split
      if (!offsets.empty() && e->size != size)
        throw Error("model " + name_ + ": tied parameters of other sizes: " + name);
      offsets.push_back(e->offset);
      size = e->size;
    }
    if (offsets.empty()) continue;  // all in other stages
    if (offsets.size() != group.size()) {
      std::string names;
      for (const std::string& name : group) names += (names.empty() ? "" : ", ") + name;
      throw InputError("model " + name_ + ": parameters " + names +
                       " are one weight of the network, which this layout parts (pipeline stages or a split layer): "
                       "keep the layers that share it in one stage, unsplit");
    }
    tied_.push_back({std::move(offsets), size});
  }
}

std::vector<bool> Model::kept_with_previous(std::size_t layers) const {
  std::vector<bool> kept(layers, false);
  for (const auto& group : tied_names_) {
    std::size_t first = layers, last = 0;
    for (const std::string& name : group) {  // "<whole layer index>.<name>"
      const std::size_t layer = std::stoul(name.substr(0, name.find('.')));
      first = std::min(first, layer);
      last = std::max(last, layer);
    }
    for (std::size_t i = first + 1; i <= last && i < layers; ++i) kept[i] = true;
  }
  return kept;
}

void Model::tie_gradients() {
  for (const TiedGroup& group : tied_)
    for (std::size_t k = 0; k < group.size; ++k) {
      float sum = 0.0f;
      for (const std::size_t offset : group.offsets) sum += grads_view_[offset + k];
      for (const std::size_t offset : group.offsets) grads_view_[offset + k] = sum;
    }
}

void Model::initialize(std::uint64_t seed) {
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    const ParamSpec& spec = entries_[e].spec;
    const std::span<float> values = params_view_.subspan(entries_[e].offset, entries_[e].size);
    if (const std::vector<float>* given = starting_value(entries_[e].name)) {
      if (given->size() != whole_size(spec))
        throw Error("model " + name_ + ": " + entries_[e].name + " starts from " + std::to_string(given->size()) +
                    " values, but holds " + std::to_string(whole_size(spec)));
      take_slice(*given, spec, values);
    } else if (spec.whole_dims.empty()) {
      initialize_param(spec, values, seed, first_entry_ + e);
    } else {
      initialize_part(spec, values, seed, first_entry_ + e);
    }
  }
  starting_values_.reset();  // read once: an imported graph's weights are not kept twice
}

const std::vector<float>* Model::starting_value(const std::string& name) const {
  if (!starting_values_) return nullptr;
  const auto it = starting_values_->find(name);
  return it == starting_values_->end() ? nullptr : &it->second;
}

std::vector<WholeSegment> Model::whole_segments() const {
  std::vector<WholeSegment> segments;
  for (const auto& e : entries_)
    for (const SliceRun& run : slice_runs(e.spec)) {
      const WholeSegment next{e.offset + run.offset, e.whole_offset + run.whole_offset, run.count, run.blocks, run.stride};
      WholeSegment* last = segments.empty() ? nullptr : &segments.back();
      if (last && last->blocks == 1 && next.blocks == 1 && last->offset + last->count == next.offset &&
          last->whole_offset + last->count == next.whole_offset)
        last->count += next.count;
      else
        segments.push_back(next);
    }
  return segments;
}

std::vector<std::pair<std::size_t, std::size_t>> Model::whole_param_ranges() const {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (const auto& e : entries_) {
    if (!e.spec.whole_dims.empty()) continue;
    if (!ranges.empty() && ranges.back().first + ranges.back().second == e.offset)
      ranges.back().second += e.size;
    else
      ranges.emplace_back(e.offset, e.size);
  }
  return ranges;
}

dt Model::input_type(const Context& ctx) {
  if (layers_.empty()) return dt::f32;
  choose_output_types(ctx, layers_, dt::f32);  // the first layer's answer may depend on its output's type
  return ctx.compute_type() == dt::bf16 && layers_[0]->takes_bf16() ? dt::bf16 : dt::f32;
}

void Model::setup(Context& ctx, const dnnl::memory::desc& input_md, Mode mode) {
  if (!finalized_) throw Error("model " + name_ + ": forward before finalize()");
  const dims_t d = dims_of(input_md);
  if (is_first_stage() &&
      (d.size() != 4 || d[1] != input_shape_[0] || d[2] != input_shape_[1] || d[3] != input_shape_[2]))
    throw InputError("model " + name_ + " expects images [C, H, W] = " + to_string(input_shape_) + ", got a batch " +
                     to_string(d));
  output_mds_.clear();
  choose_output_types(ctx, layers_, dt::f32);  // the loss, and the next stage's messages, take f32
  move_relu_backward_into_pools(layers_);
  dnnl::memory::desc md = incoming_.empty() ? input_md : receive_descs(input_md);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    // A layer's gradient comes from the next layer, which gives it up; the last layer's is the caller's.
    layers_[i]->set_may_overwrite_diff_dst(i + 1 < layers_.size());
    md = layers_[i]->setup(ctx, md, mode, i > 0 || !is_first_stage());
    output_mds_.push_back(md);
  }
  const dims_t out = dims_of(md);
  if (is_last_stage() && (out.size() != 2 || out[1] != num_classes_))
    throw Error("model " + name_ + ": last layer gives " + to_string(out) + ", expected [N, " +
                std::to_string(num_classes_) + "]");
  if (!outgoing_.empty()) {
    auto numbers = static_cast<dnnl::memory::dim>(product(per_image(md)));
    for (const auto& side : outgoing_) numbers += static_cast<dnnl::memory::dim>(product(side->dims));
    packed_output_md_ = plain_desc({out[0], numbers});
  }
  setup_md_ = input_md;
  setup_mode_ = mode;
  plan_segments(ctx);
}

dnnl::memory::desc Model::receive_descs(const dnnl::memory::desc& packed) {
  const dims_t d = dims_of(packed);
  std::size_t numbers = product(stage_input_dims_);
  for (const auto& side : incoming_) numbers += product(side->dims);
  if (d.size() != 2 || static_cast<std::size_t>(d[1]) != numbers || data_type_of(packed) != dt::f32)
    throw Error("model " + name_ + ": the stage's input " + to_string(d) + " does not hold the " +
                std::to_string(numbers) + " numbers an image of the values that cross its first cut");
  for (const auto& side : incoming_) side->desc = plain_desc(with_batch(d[0], side->dims));
  return plain_desc(with_batch(d[0], stage_input_dims_));
}

const Tensor& Model::unpack_input(Context& ctx, const Tensor& input) {
  PackedValues packed(ctx, input);
  Tensor& chain = held(ctx, unpacked_input_, plain_desc(with_batch(input.dims()[0], stage_input_dims_)));
  packed.take(chain, stage_input_dims_);
  for (const auto& side : incoming_) {
    packed.take(held(ctx, side->held, side->desc), side->dims);
    side->value = &side->held;
  }
  return chain;
}

const Tensor& Model::pack_output(Context& ctx, const Tensor& output) {
  PackedValues packed(ctx, held(ctx, packed_output_, packed_output_md_));
  packed.put(output, per_image(output.desc()));
  for (const auto& side : outgoing_) packed.put(*side->value, side->dims);
  return packed_output_;
}

const Tensor& Model::unpack_output_gradient(Context& ctx, const Tensor& diff) {
  if (!packed_output_.empty()) ctx.give_back(packed_output_);  // the caller has sent it
  PackedValues packed(ctx, diff);
  Tensor& chain = held(ctx, unpacked_output_grad_, output_mds_.back());
  packed.take(chain, per_image(chain.desc()));
  for (const auto& side : outgoing_) {
    if (!side->grad.empty()) throw Error("model " + name_ + ": a side value's last gradient is still held");
    side->grad = ctx.lease(side->desc);
    packed.take(side->grad, side->dims);
  }
  return chain;
}

const Tensor& Model::pack_input_gradient(Context& ctx, const Tensor& diff) {
  PackedValues packed(ctx, held(ctx, packed_input_grad_, setup_md_));
  packed.put(diff, stage_input_dims_);
  for (const auto& side : incoming_) {
    packed.put(side->grad, side->dims);
    ctx.give_back(side->grad);
  }
  return packed_input_grad_;
}

const Tensor& Model::forward(Context& ctx, const Tensor& input, Mode mode) {
  if (output_mds_.empty() || input.desc() != setup_md_ || mode != setup_mode_) setup(ctx, input.desc(), mode);
  Profiler* prof = mode == Mode::train ? profiler_ : nullptr;
  if (prof && prof->entries().size() != layers_.size()) {
    std::vector<std::string> names;
    for (auto& l : layers_) names.push_back(l->describe());
    prof->resize(names);
  }
  const Tensor* x = incoming_.empty() ? &input : &unpack_input(ctx, input);
  const bool recompute = recompute_ && mode == Mode::train;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (const auto side = layers_[i]->side_closed()) side->read_again = recompute && recomputed(i);
  const bool train = mode == Mode::train;
  param_use_ = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    // A sharded layer's gather and release lie outside its time: the planner counts the gathers apart.
    if (train) use_params(i);
    auto t0 = Profiler::clock::now();
    if (recompute && starts_segment(i) && recomputed(i)) keep_segment_start(ctx, i, *x);
    x = &layers_[i]->forward(ctx, *x);
    // Within the recomputed segments all goes back: the next one starts from its copy of this output. The
    // last segment reads its input in backward. A Fork's output is its input, which the next layer reads
    // (and an identity Fork's Join, later).
    if (i > 0 && recompute && recomputed(i) && !layers_[i]->side_opened())
      layers_[i - 1]->release_activations(ctx);
    else if (i > 0)
      release_unread_output(ctx, *layers_[i - 1], *layers_[i]);
    if (prof) prof->add_forward(i, Profiler::clock::now() - t0);
    if (train) done_with_params(i);
    if (between_layers && mode == Mode::train) between_layers();
  }
  return outgoing_.empty() ? *x : pack_output(ctx, *x);
}

const Tensor& Model::backward(Context& ctx, const Tensor& diff_output) {
  if (setup_mode_ != Mode::train) throw Error("model " + name_ + ": backward after an inference forward");
  const Tensor* g = outgoing_.empty() ? &diff_output : &unpack_output_gradient(ctx, diff_output);
  for (std::size_t i = layers_.size(); i-- > 0;) {
    if (recompute_ && recomputed(i) && starts_segment(i + 1)) recompute_segment(ctx, segment_of_[i]);
    use_params(i);
    auto t0 = Profiler::clock::now();
    const std::size_t begin = layer_param_begin_[i], end = layer_param_begin_[i + 1];
    // A layer that cannot add to its gradients overwrites them; what was there is kept and added back.
    Tensor kept;
    if (!layers_[i]->accumulate_gradients(accumulate_) && accumulate_ && end > begin) {
      kept = ctx.lease(plain_desc({static_cast<dnnl::memory::dim>(end - begin)}));
      std::copy(grads_view_.begin() + begin, grads_view_.begin() + end, kept.data());
    }
    g = &layers_[i]->backward(ctx, *g);
    if (recompute_ && recomputed(i) && starts_segment(i)) ctx.give_back(segment_starts_[segment_of_[i]].input_copy);
    if (!kept.empty()) {
      for (std::size_t k = 0; k < end - begin; ++k) grads_view_[begin + k] += kept.data()[k];
      ctx.give_back(kept);
    }
    if (i + 1 < layers_.size()) release_after_backward(ctx, *layers_[i + 1], i + 2 < layers_.size());
    if (profiler_) profiler_->add_backward(i, Profiler::clock::now() - t0);
    done_with_params(i);
    if (on_gradients_ready && end > begin) on_gradients_ready(begin, end - begin);
    if (between_layers) between_layers();
  }
  if (!unpacked_output_grad_.empty()) ctx.give_back(unpacked_output_grad_);
  if (!incoming_.empty()) g = &pack_input_gradient(ctx, *g);
  if (is_first_stage()) release_input_gradient(ctx);
  return *g;
}

void Model::plan_segments(Context& ctx) {
  for (SegmentStart& start : segment_starts_)
    if (!start.input_copy.empty()) ctx.give_back(start.input_copy);
  segment_starts_.clear();  // no input kept from the last set-up's forward
  std::vector<double> output_bytes;
  for (const auto& md : output_mds_) output_bytes.push_back(static_cast<double>(md.get_size()));
  segment_of_ = recompute_segments(output_bytes);
  segment_starts_.resize(segment_count());
  plan_param_uses();
}

void Model::plan_param_uses() {
  param_uses_.clear();
  auto use = [&](std::size_t i) {
    if (param_range(i).count > 0) param_uses_.push_back(i);
  };
  for (std::size_t i = 0; i < layers_.size(); ++i) use(i);
  for (std::size_t i = layers_.size(); i-- > 0;) {
    if (recompute_ && recomputed(i) && starts_segment(i + 1))
      for (std::size_t j = 0; j < layers_.size(); ++j)
        if (segment_of_[j] == segment_of_[i]) use(j);
    use(i);
  }
}

// A layer run out of the planned order (another micro-batch's forward between this one's) ends the guesses
// for this pass: each layer is then gathered when it runs.
void Model::use_params(std::size_t i) {
  const ParamRange now = param_range(i);
  if (!before_layer || now.count == 0) return;
  ParamRange next;
  if (param_use_ < param_uses_.size() && param_uses_[param_use_] == i) {
    if (++param_use_ < param_uses_.size()) next = param_range(param_uses_[param_use_]);
  } else {
    param_use_ = param_uses_.size();
  }
  before_layer(now, next);
}

void Model::done_with_params(std::size_t i) {
  if (after_layer && param_range(i).count > 0) after_layer(param_range(i));
}

std::size_t Model::segment_count() const { return segment_of_.empty() ? 0 : segment_of_.back() + 1; }

bool Model::starts_segment(std::size_t i) const {
  return i < segment_of_.size() && (i == 0 || segment_of_[i] != segment_of_[i - 1]);
}

bool Model::recomputed(std::size_t i) const { return segment_of_[i] + 1 < segment_count(); }

// A later segment's input is copied, so that the layer before it, which made it, can give back all it
// holds; the first segment's is the caller's, alive until backward.
void Model::keep_segment_start(Context& ctx, std::size_t first, const Tensor& input) {
  SegmentStart& start = segment_starts_[segment_of_[first]];
  if (first == 0) {
    start.input = &input;
  } else {
    if (start.input_copy.empty() || start.input_copy.desc() != input.desc()) {
      if (!start.input_copy.empty()) ctx.give_back(start.input_copy);
      start.input_copy = ctx.lease(input.desc());
    }
    std::memcpy(start.input_copy.data(), input.data(), input.bytes());
    start.input = &start.input_copy;
  }
  start.floats.clear();
  start.words.clear();
  for (std::size_t i = first; i < layers_.size() && segment_of_[i] == segment_of_[first]; ++i)
    for (const StateView& v : layers_[i]->state()) {
      start.floats.emplace_back(v.floats.begin(), v.floats.end());
      start.words.emplace_back(v.words.begin(), v.words.end());
    }
}

// The segment's layers run their forward again on the input kept, with their state as it was before the
// first: so their outputs and what their backwards read are the first forward's, bit for bit, and their
// state ends as the first forward left it.
void Model::recompute_segment(Context& ctx, std::size_t segment) {
  const SegmentStart& start = segment_starts_.at(segment);
  if (!start.input) throw Error("model " + name_ + ": backward of a recomputed segment without its forward");
  const std::size_t first =
      static_cast<std::size_t>(std::find(segment_of_.begin(), segment_of_.end(), segment) - segment_of_.begin());
  std::size_t n = 0, end = first;
  for (; end < layers_.size() && segment_of_[end] == segment; ++end)
    for (const StateView& v : layers_[end]->state()) {
      std::copy(start.floats[n].begin(), start.floats[n].end(), v.floats.begin());
      std::copy(start.words[n].begin(), start.words[n].end(), v.words.begin());
      ++n;
    }
  const Tensor* x = start.input;
  for (std::size_t i = first; i < end; ++i) {
    // Each layer's second forward counts in its backward's time, as the planner predicts it.
    use_params(i);
    const auto t0 = Profiler::clock::now();
    x = &layers_[i]->forward(ctx, *x);
    if (profiler_) profiler_->add_backward(i, Profiler::clock::now() - t0);
    done_with_params(i);
    if (i > first) release_unread_output(ctx, *layers_[i - 1], *layers_[i]);
    if (between_layers) between_layers();
  }
}

void Model::release_input_gradient(Context& ctx) {
  if (!layers_.empty()) release_after_backward(ctx, *layers_[0], layers_.size() > 1);
  for (Tensor* t : {&packed_input_grad_, &unpacked_input_})
    if (!t->empty()) ctx.give_back(*t);
  for (const auto& side : incoming_) {
    if (!side->held.empty()) ctx.give_back(side->held);
    side->value = nullptr;
  }
}

std::vector<StateView> Model::state() {
  std::vector<StateView> all;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    append_prefixed(all, layers_[i]->state(), std::to_string(first_layer_ + i));
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
    dims_t out = dims_of(output_mds_[i]);
    out.erase(out.begin());
    // A row as long as its layer's description (a graph piece's lists its operators), never cut short.
    const std::string description = layers_[i]->describe();
    const char* format = "  %-3zu %-32s %-18s %12zu\n";
    std::vector<char> row(
        static_cast<std::size_t>(std::snprintf(nullptr, 0, format, i, description.c_str(), to_string(out).c_str(), n)) +
        1);
    std::snprintf(row.data(), row.size(), format, i, description.c_str(), to_string(out).c_str(), n);
    s += row.data();
  }
  std::snprintf(line, sizeof line, "  total parameters: %zu\n", param_count());
  s += line;
  output_mds_.clear();  // force a fresh set-up for the first real batch
  return s;
}

}  // namespace ddl
