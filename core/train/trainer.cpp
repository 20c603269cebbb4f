#include "core/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace ddl {
namespace {

// Keeps `t` a plain tensor of `dims` and `type`, reallocating only when either changes.
void ensure_plain(Tensor& t, const dims_t& dims, Context& ctx, dt type = dt::f32) {
  const dnnl::memory::desc md = plain_desc(dims, type);
  if (t.empty() || t.desc() != md) t = Tensor(md, ctx.engine());
}

std::span<std::byte> bytes_of(Tensor& t) { return {static_cast<std::byte*>(t.memory().get_data_handle()), t.bytes()}; }

// Between two plain tensors of one shape: a copy where the types agree (f32 runs, as before bf16 messages),
// else a converting reorder (bf16 runs; oneDNN caches the primitive).
void convert(Context& ctx, const Tensor& from, Tensor& to) {
  if (from.desc() == to.desc()) {
    std::memcpy(to.memory().get_data_handle(), from.memory().get_data_handle(), from.bytes());
    return;
  }
  dnnl::memory src = from.memory(), dst = to.memory();
  dnnl::reorder(src, dst).execute(ctx.stream(), src, dst);
}

void grow(std::vector<Tensor>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

Trainer::Trainer(Context& ctx, std::vector<Model*> slots, Optimizer& optimizer, const LrSchedule& schedule,
                 ReplicaGroup& replicas, StageLink* link, const MicroBatching& batching, TensorGroup* tensor,
                 float label_smoothing)
    : ctx_(ctx),
      slots_(std::move(slots)),
      optimizer_(optimizer),
      schedule_(schedule),
      replicas_(replicas),
      link_(link),
      batching_(batching),
      tensor_(tensor),
      loss_(label_smoothing),
      whole_ranges_(slots_.empty() ? decltype(whole_ranges_){} : slots_[0]->whole_param_ranges()) {
  if (slots_.empty()) throw Error("trainer: no model");
  const int needed = slots_needed(batching_, stage(), stages());
  if (static_cast<int>(slots_.size()) < needed)
    throw Error("trainer: the schedule keeps " + std::to_string(needed) + " micro-batches in flight, " +
                std::to_string(slots_.size()) + " model copies given");
  // A shared weight's copies take the sum of their gradients, which a rank holding one shard does not have.
  if (slots_[0]->has_tied_parameters() && optimizer_.sharded())
    throw InputError(
        "the model shares a weight between layers, which sharded optimizer state (--shard-state) cannot train as one");
  const std::span<float> params = slots_[0]->params();
  if (const auto shard = replicas_.parameter_shard(params.size())) {
    if (!optimizer_.sharded()) throw Error("trainer: sharded parameters need a sharded optimizer");
    // A pipeline's micro-batches interleave their layers, so the next layer is not known ahead there.
    sharded_params_.emplace(replicas_, params, *shard, !link_);
  }
  for (Model* m : slots_) {
    m->on_gradients_ready = [this](std::size_t o, std::size_t c) { gradients_ready(o, c); };
    if (link_) m->between_layers = [this] { link_->progress(); };
    if (sharded_params_) {
      m->before_layer = [this](ParamRange now, ParamRange next) { sharded_params_->before_layer(now, next); };
      m->after_layer = [this](ParamRange now) { sharded_params_->after_layer(now); };
    }
  }
}

Trainer::~Trainer() {
  for (Model* m : slots_) {
    m->on_gradients_ready = nullptr;
    m->between_layers = nullptr;
    m->before_layer = nullptr;
    m->after_layer = nullptr;
  }
}

int Trainer::slots_needed(const MicroBatching& batching, int stage, int stages) {
  return micro_batches_in_flight(stage_ops(batching.schedule, stage, stages, batching.micro_batches));
}

// During each micro-batch's backward (the later ones add to the gradients of the earlier): on the last,
// the finished range is final, and the replica group may start averaging it.
void Trainer::gradients_ready(std::size_t offset, std::size_t count) {
  if (backwards_done_ + 1 < micro_batches_) return;
  const std::span<float> grads = slots_[0]->grads();
  if (micro_batches_ > 1) {
    // Each micro-batch's gradient is a mean over its images; the step's is the mean over all of them.
    const float scale = 1.0f / static_cast<float>(micro_batches_);
    for (std::size_t i = offset; i < offset + count; ++i) grads[i] *= scale;
  }
  replicas_.gradients_ready(grads, offset, count);
}

void Trainer::average_whole_over_group() {
  const std::span<float> grads = slots_[0]->grads();
  // Sharded, only this replica's shard of the gradients was reduced: every rank of the group holds the same
  // shard, since a split layer's slice is its layer's 1/T on each and their flat buffers are laid out alike.
  const auto shard = optimizer_.shard();
  const std::size_t begin = shard ? shard->begin : 0, end = shard ? shard->end : grads.size();
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (const auto& [offset, count] : whole_ranges_) {
    const std::size_t first = std::max(offset, begin), last = std::min(offset + count, end);
    if (first < last) ranges.emplace_back(first, last - first);
  }
  whole_grads_.clear();
  for (const auto& [offset, count] : ranges) whole_grads_.insert(whole_grads_.end(), &grads[offset], &grads[offset] + count);
  if (whole_grads_.empty()) return;
  tensor_->all_reduce_sum(whole_grads_);
  const float scale = 1.0f / static_cast<float>(tensor_->size());
  const float* from = whole_grads_.data();
  for (const auto& [offset, count] : ranges)
    for (std::size_t i = 0; i < count; ++i) grads[offset + i] = scale * *from++;
}

// Copies hold one set of parameters but each its own layer state (BatchNorm running statistics, dropout
// generators); the state passes from copy to copy in forward order, as if one model ran every micro-batch.
void Trainer::carry_state(std::size_t to) {
  if (to == last_forward_slot_) return;
  const auto from = slots_[last_forward_slot_]->state();
  const auto into = slots_[to]->state();
  for (std::size_t i = 0; i < from.size(); ++i) {
    std::copy(from[i].floats.begin(), from[i].floats.end(), into[i].floats.begin());
    std::copy(from[i].words.begin(), from[i].words.end(), into[i].words.begin());
  }
  last_forward_slot_ = to;
}

dims_t Trainer::input_dims(const Batch* batch, std::size_t micro, Mode mode) {
  if (first()) {
    dims_t d = batch->images.dims();
    d[0] = static_cast<dnnl::memory::dim>(micro);
    return d;
  }
  const ShapeKey key{micro, mode};
  for (const auto& [k, dims] : input_dims_)
    if (k == key) return dims;
  const dims_t d = link_->receive_dims();
  input_dims_.emplace_back(key, d);
  return d;
}

Trainer::StepSums Trainer::run_step(const Batch* batch, std::size_t n, Mode mode) {
  const bool train = mode == Mode::train;
  ctx_.begin_step(static_cast<int>(mode));
  micro_batches_ = batching_.micro_batches;
  if (!train && n % static_cast<std::size_t>(micro_batches_) != 0) micro_batches_ = 1;  // a last, partial batch
  if (n % static_cast<std::size_t>(micro_batches_) != 0)
    throw InputError("a batch of " + std::to_string(n) + " images does not split into " +
                     std::to_string(micro_batches_) + " micro-batches");
  const auto M = static_cast<std::size_t>(micro_batches_);
  const std::size_t micro = n / M;
  std::vector<PipelineOp> ops;
  if (train)
    ops = stage_ops(batching_.schedule, stage(), stages(), micro_batches_);
  else
    for (int m = 0; m < micro_batches_; ++m) ops.push_back({true, m});
  slots_in_use_ = train ? micro_batches_in_flight(ops) : 1;
  backwards_done_ = 0;

  if (link_ && first() && !last()) link_->send_labels(batch->labels);
  if (link_ && last() && !first()) {
    labels_.resize(n);
    link_->receive_labels(labels_);
  }
  if (!first() || M > 1) {
    const dims_t in = input_dims(batch, micro, mode);
    grow(inputs_, M);
    for (std::size_t m = 0; m < M; ++m) {
      ensure_plain(inputs_[m], in, ctx_, first() ? data_type_of(batch->images.desc()) : dt::f32);
      if (!first()) {
        // Messages travel in the compute type: in bf16 half the bytes, converted to the f32 input on arrival.
        Tensor* message = &inputs_[m];
        if (ctx_.compute_type() != dt::f32) {
          grow(received_activations_, M);
          ensure_plain(received_activations_[m], in, ctx_, ctx_.compute_type());
          message = &received_activations_[m];
        }
        link_->post_receive(StageLink::Flow::activation, static_cast<int>(m), bytes_of(*message));
      } else {  // the first stage cuts its batch
        const auto* images = static_cast<const std::byte*>(batch->images.memory().get_data_handle());
        std::memcpy(bytes_of(inputs_[m]).data(), images + m * inputs_[m].bytes(), inputs_[m].bytes());
      }
    }
  }
  StepSums sums;
  for (const auto& op : ops) {
    if (op.forward)
      forward(batch, op.micro, micro, mode, sums);
    else
      backward(op.micro);
  }
  if (link_) {
    const auto waiting = Timeline::span(timeline_, "finish sends");
    link_->wait_sends();
  }
  return sums;
}

void Trainer::forward(const Batch* batch, int m, std::size_t micro, Mode mode, StepSums& sums) {
  const auto i = static_cast<std::size_t>(m);
  const std::size_t slot = mode == Mode::train ? i % static_cast<std::size_t>(slots_in_use_) : 0;
  if (mode == Mode::train) carry_state(slot);
  const Tensor* input = nullptr;
  if (!first()) {
    const auto waiting = Timeline::span(timeline_, "receive activations", m);
    link_->wait_receive(StageLink::Flow::activation, m);
    if (ctx_.compute_type() != dt::f32) convert(ctx_, received_activations_[i], inputs_[i]);
    input = &inputs_[i];
  } else {
    input = micro_batches_ == 1 ? &batch->images : &inputs_[i];
  }
  auto pass = Timeline::span(timeline_, mode == Mode::train ? "forward" : "forward (evaluation)", m);
  const Tensor& out = slots_[slot]->forward(ctx_, *input, mode);
  if (last()) {
    std::span<const std::int32_t> labels = first() ? std::span<const std::int32_t>(batch->labels) : labels_;
    labels = labels.subspan(i * micro, micro);
    if (group_batch(mode)) {  // in the order the split layer gathered the images: rank after rank
      group_labels_.resize(micro * static_cast<std::size_t>(tensor_->size()));
      tensor_->all_gather(labels, group_labels_);
      labels = group_labels_;
    }
    const LossSums s = loss_.forward(ctx_, out, labels);
    sums.loss += s.loss;
    sums.correct += static_cast<double>(s.correct);
    sums.images += static_cast<double>(labels.size());
    if (mode == Mode::train) {
      grow(diff_logits_, i + 1);
      const Tensor& diff = loss_.backward();
      ensure_plain(diff_logits_[i], diff.dims(), ctx_);
      std::memcpy(diff_logits_[i].data(), diff.data(), diff.bytes());
    }
    return;
  }
  // The next stage gets the plain layout, whatever layout this stage's last layer chose.
  grow(outputs_, i + 1);
  ensure_plain(outputs_[i], out.dims(), ctx_, ctx_.compute_type());
  if (!to_plain_ || to_plain_from_ != out.desc()) {
    to_plain_.emplace(ctx_, out.desc(), outputs_[i].desc());
    to_plain_from_ = out.desc();
  }
  (*to_plain_)(ctx_, out.memory(), outputs_[i].memory());
  if (std::find(dims_sent_.begin(), dims_sent_.end(), ShapeKey{micro, mode}) == dims_sent_.end()) {
    link_->send_dims(out.dims());
    dims_sent_.push_back({micro, mode});
  }
  link_->send(StageLink::Flow::activation, m, bytes_of(outputs_[i]));
  if (mode == Mode::train) {
    grow(received_gradients_, i + 1);
    ensure_plain(received_gradients_[i], out.dims(), ctx_, ctx_.compute_type());
    link_->post_receive(StageLink::Flow::gradient, m, bytes_of(received_gradients_[i]));
  }
}

void Trainer::backward(int m) {
  const auto i = static_cast<std::size_t>(m);
  Model& model = *slots_[i % static_cast<std::size_t>(slots_in_use_)];
  const Tensor* diff = nullptr;
  if (last()) {
    diff = &diff_logits_[i];
  } else {
    const auto waiting = Timeline::span(timeline_, "receive gradients", m);
    link_->wait_receive(StageLink::Flow::gradient, m);
    const dnnl::memory::desc& out_md = model.output_desc();
    if (from_plain_to_ != out_md) {
      from_plain_ = Relayout(ctx_, received_gradients_[i].desc(), out_md);
      from_plain_to_ = out_md;
    }
    diff = &from_plain_(ctx_, received_gradients_[i]);
  }
  model.accumulate_gradients(backwards_done_ > 0);
  auto pass = Timeline::span(timeline_, "backward", m);
  const Tensor& g = model.backward(ctx_, *diff);
  ++backwards_done_;
  if (first()) return;
  // Layer 0 returns the gradient in the layout of its input, which was plain.
  grow(sent_gradients_, i + 1);
  ensure_plain(sent_gradients_[i], g.dims(), ctx_, ctx_.compute_type());
  if (g.desc() != plain_desc(g.dims(), data_type_of(g.desc())))
    throw Error("pipeline: the input gradient is not in the plain layout");
  convert(ctx_, g, sent_gradients_[i]);
  link_->send(StageLink::Flow::gradient, m, bytes_of(sent_gradients_[i]));
  model.release_input_gradient(ctx_);
}

PassMetrics Trainer::reduce(double loss_sum, double correct, double images, double seconds) {
  double sums[3] = {loss_sum, correct, images};
  replicas_.sum(sums);
  if (link_) link_->broadcast_from_last(sums);
  PassMetrics m;
  m.images = sums[2];
  m.loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
  m.accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
  m.seconds = seconds;
  return m;
}

PassMetrics Trainer::train_epoch(BatchLoader* loader, std::size_t epoch, std::size_t steps, std::size_t first_step,
                                 const EpochHooks& hooks) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  double loss_sum = 0.0, correct = 0.0, images = 0.0;
  std::size_t step = first_step;
  for (; step < steps; ++step) {
    const Batch* batch = nullptr;
    std::size_t n = batching_.batch_size;
    if (first()) {
      const auto waiting = Timeline::span(timeline_, "wait for data");
      batch = loader->next();
      if (!batch) break;
      n = batch->size();
    }
    last_lr_ = schedule_.at(static_cast<double>(epoch) + static_cast<double>(step) / static_cast<double>(steps));
    if (sharded_params_) sharded_params_->begin_step();
    const StepSums sums = run_step(batch, n, Mode::train);
    if (!std::isfinite(sums.loss))
      throw Error("training diverged: loss is " + std::to_string(sums.loss) + " at epoch " + std::to_string(epoch + 1) +
                  " step " + std::to_string(step + 1) + " (lower the learning rate?)");
    {
      const auto reducing = Timeline::span(timeline_, "gradient all-reduce");
      if (optimizer_.sharded())
        replicas_.reduce_scatter(slots_[0]->grads());
      else
        replicas_.average(slots_[0]->grads());
      if (tensor_ && tensor_->size() > 1) average_whole_over_group();
      slots_[0]->tie_gradients();
    }
    {
      const auto stepping = Timeline::span(timeline_, "optimizer");
      optimizer_.step(slots_[0]->params(), slots_[0]->grads(), last_lr_);
    }
    if (optimizer_.sharded() && !sharded_params_) {
      const auto gathering = Timeline::span(timeline_, "parameter all-gather");
      replicas_.all_gather(slots_[0]->params());
    }
    carry_state(0);
    loss_sum += sums.loss;
    correct += sums.correct;
    images += sums.images;
    if (hooks.progress) {
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      hooks.progress({step + 1, steps, loss_sum / images, images * replicas_.size() / s});
    }
    if (hooks.after_step && hooks.after_step()) {
      ++step;
      break;
    }
  }
  whole_parameters();
  PassMetrics m = reduce(loss_sum, correct, images, std::chrono::duration<double>(clock::now() - t0).count());
  m.steps = step - first_step;
  return m;
}

PassMetrics Trainer::evaluate(BatchLoader* loader, std::size_t images) {
  whole_parameters();
  const auto t0 = std::chrono::steady_clock::now();
  double loss_sum = 0.0, correct = 0.0, done = 0.0;
  for (std::size_t seen = 0;;) {
    const Batch* batch = nullptr;
    std::size_t n = 0;
    if (first()) {
      batch = loader->next();
      if (!batch) break;
      n = batch->size();
    } else {
      if (seen >= images) break;
      n = std::min(batching_.batch_size, images - seen);
    }
    const StepSums sums = run_step(batch, n, Mode::infer);
    loss_sum += sums.loss;
    correct += sums.correct;
    done += sums.images;
    seen += n;
  }
  return reduce(loss_sum, correct, done,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace ddl
