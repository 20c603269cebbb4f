#include "launch/plan_profile.hpp"

#include <chrono>
#include <cstdio>

#include "core/optim/optimizer.hpp"
#include "core/profiler.hpp"
#include "core/train/resources.hpp"
#include "launch/tensor_split.hpp"

namespace ddl {
namespace {

using clock = std::chrono::steady_clock;

double since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

// The seconds of MPI all-reduces of each of `sizes` floats over `comm`: the best of a few, after a warm-up,
// taken in turn so that a burst of other work on the node slows every size alike.
std::vector<double> time_allreduces(const Communicator& comm, std::initializer_list<std::size_t> sizes) {
  std::vector<std::vector<float>> buffers;
  for (std::size_t n : sizes) buffers.emplace_back(n, 1.0f);
  std::vector<double> best(buffers.size(), 1e30);
  for (int rep = 0; rep < 6; ++rep)
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      comm.barrier();
      const auto t0 = clock::now();
      comm.allreduce_sum(buffers[i]);
      if (rep > 0) best[i] = std::min(best[i], since(t0));
    }
  comm.allreduce_max(best);  // the collective ends when its slowest rank does
  return best;
}

// Latency and bandwidth of a ring all-reduce over n ranks, from two sizes: t = 2 (n - 1) lat + 2 (n - 1) / n B / bw.
Link fit_link(const Communicator& comm, std::size_t large) {
  constexpr std::size_t small = 256;  // floats: 1 KB
  const std::vector<double> t = time_allreduces(comm, {small, large});
  const double n = comm.size(), a = 2 * (n - 1), c = 2 * (n - 1) / n;
  Link link;
  // Noise can leave the large message no slower than the small one (a loaded node): then all of its time
  // is taken as bandwidth, never a free link.
  link.bytes_per_s = t[1] > t[0] ? c * 4.0 * (large - small) / (t[1] - t[0]) : c * 4.0 * large / t[1];
  link.latency_s = std::max(0.0, (t[0] - c * 4.0 * small / link.bytes_per_s) / a);
  return link;
}

}  // namespace

MeasuredLinks measure_links(const TrainOptions& o, const Communicator& world, std::size_t probe_bytes) {
  // Within the largest node, and between one rank of each node.
  const Communicator node = world.split_shared();
  const Communicator leaders = world.split(node.rank() == 0 ? 0 : 1, world.rank());
  std::vector<double> node_sizes(1, static_cast<double>(node.size()));
  world.allreduce_max(node_sizes);
  const bool several_nodes = world.any(node.size() < world.size());
  // Latency and seconds per byte, within a node and between nodes; 0: not measured. The slowest of each.
  std::vector<double> links{0, 0, 0, 0};
  if (node.size() > 1 && node.size() == static_cast<int>(node_sizes[0])) {
    const Link within = fit_link(node, probe_bytes / 4);
    links[0] = within.latency_s;
    links[1] = 1 / within.bytes_per_s;
  }
  if (several_nodes && node.rank() == 0 && leaders.size() > 1) {
    const Link between = fit_link(leaders, probe_bytes / 4);
    links[2] = between.latency_s;
    links[3] = 1 / between.bytes_per_s;
  }
  world.allreduce_max(links);
  const bool within_measured = links[1] > 0, between_measured = links[3] > 0;
  MeasuredLinks m{within_measured ? Link{links[0], 1 / links[1]} : o.link_within,
                  between_measured ? Link{links[2], 1 / links[3]} : o.link_between, {}, within_measured,
                  between_measured};
  m.text = "links: within a node " + m.within.describe() + (within_measured ? " (measured)" : " (--link-within)") +
           ", between nodes " + m.between.describe() + (between_measured ? " (measured)" : " (--link-between)");
  return m;
}

namespace {

// Every rank's figures, averaged: the ranks then plan alike.
void average_over_ranks(Profile& p, const Communicator& world) {
  std::vector<double> figures{p.base_bytes, p.optimizer_s_per_param, p.measured_bytes};
  for (const auto& l : p.layers) {
    figures.push_back(l.seconds);
    figures.push_back(l.fixed_seconds);
  }
  world.allreduce_sum(figures);  // averaged below
  for (double& f : figures) f /= world.size();
  p.base_bytes = figures[0];
  p.optimizer_s_per_param = figures[1];
  p.measured_bytes = figures[2];
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    p.layers[i].seconds = figures[3 + 2 * i];
    p.layers[i].fixed_seconds = figures[4 + 2 * i];
  }
}

}  // namespace

MeasuredProfile measure_profile(const TrainOptions& o, const ModelConfig& config, const Communicator& world,
                                dnnl::memory::data_type compute_type) {
  MeasuredProfile measured;
  Profile& p = measured.profile;
  p.model = o.model;
  p.batch = o.batch_size;
  p.base_bytes = static_cast<double>(resident_bytes());
  {
    // A context of its own, whose pooled buffers go with the probe.
    Context ctx;
    ctx.set_compute_type(compute_type);
    auto probe = make_model(o.model, config, ctx);
    probe->initialize(o.seed);
    const dims_t& in = probe->input_shape();
    // Each layer's seconds per call at `batch` images: a warm-up step, then the mean of two.
    auto time_layers = [&](dnnl::memory::dim batch) {
      Tensor input(plain_desc({batch, in[0], in[1], in[2]}), ctx.engine());
      std::fill(input.data(), input.data() + input.elements(), 0.5f);
      Profiler profiler;
      constexpr int kWarmup = 1, kTimed = 2;
      for (int step = 0; step < kWarmup + kTimed; ++step) {
        if (step == kWarmup) probe->attach_profiler(&profiler);
        const Tensor& out = probe->forward(ctx, input, Mode::train);
        Tensor diff(out.desc(), ctx.engine());
        std::fill(diff.data(), diff.data() + diff.bytes() / sizeof(float), 1e-3f);
        probe->backward(ctx, diff);
      }
      probe->attach_profiler(nullptr);
      std::vector<double> seconds;
      for (const auto& e : profiler.entries()) seconds.push_back((e.forward_s + e.backward_s) / kTimed);
      return seconds;
    };
    const auto b = static_cast<dnnl::memory::dim>(o.batch_size);
    const std::vector<double> at_batch = time_layers(b);
    std::vector<double> output_bytes;
    for (const auto& md : probe->output_descs())
      // In f32 whatever the precision: the messages between stages and the split layers' collectives
      // carry f32 (bf16 activations stay inside a stage); for memory in bf16 an overestimate.
      output_bytes.push_back(4.0 * static_cast<double>(product(dims_of(md))) / static_cast<double>(b));
    // The optimizer's state is allocated below; the formula counts it, so it is measured with it.
    const std::size_t n = probe->param_count();
    auto optimizer = make_optimizer(o, *probe);
    std::size_t state_floats = 0;
    for (const auto& s : optimizer->state()) state_floats += s.floats.size();
    p.optimizer_floats = static_cast<double>(state_floats) / static_cast<double>(std::max<std::size_t>(1, n));
    optimizer->step(probe->params(), probe->grads(), 0.0f);
    const auto t0 = clock::now();
    optimizer->step(probe->params(), probe->grads(), 0.0f);
    p.optimizer_s_per_param = since(t0) / static_cast<double>(n);
    p.measured_bytes = static_cast<double>(peak_resident_bytes()) - p.base_bytes;
    // A quarter of the batch too: a call's time = fixed + images x per image, fitted through both.
    const dnnl::memory::dim quarter = std::max<dnnl::memory::dim>(1, b / 4);
    const std::vector<double> at_quarter = quarter < b ? time_layers(quarter) : at_batch;
    double input_bytes = 4.0 * static_cast<double>(in[0] * in[1] * in[2]);
    for (std::size_t i = 0; i < probe->num_layers(); ++i) {
      LayerCost l;
      l.name = probe->layer(i).describe();
      l.seconds = quarter < b ? std::max(0.0, (at_batch[i] - at_quarter[i]) / static_cast<double>(b - quarter))
                              : at_batch[i] / static_cast<double>(b);
      l.fixed_seconds = std::max(0.0, at_batch[i] - static_cast<double>(b) * l.seconds);
      l.params = static_cast<double>(probe->layer_param_count(i));
      l.input_bytes = input_bytes;
      l.output_bytes = output_bytes[i];
      l.split = split_kind(*probe, i, l.divisor);
      input_bytes = l.output_bytes;
      p.layers.push_back(l);
    }
  }
  // The probe's memory is freed: the peaks reported during training leave it out.
  restart_peak_resident();
  average_over_ranks(p, world);
  const MeasuredLinks links = measure_links(o, world, kProbeBytesAtStart);
  p.within_node = links.within;
  p.between_nodes = links.between;
  measured.links = links.text;
  return measured;
}

}  // namespace ddl
