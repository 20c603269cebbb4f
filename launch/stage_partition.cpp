#include "launch/stage_partition.hpp"

#include <algorithm>
#include <cstdio>

#include "comm/mpi_stage_link.hpp"
#include "core/error.hpp"
#include "core/plan/balanced_partition.hpp"
#include "core/profiler.hpp"

namespace ddl {

LayerRange stage_range(const std::vector<std::size_t>& counts, int stage) {
  LayerRange r;
  for (int s = 0; s < stage; ++s) r.begin += counts[static_cast<std::size_t>(s)];
  r.end = r.begin + counts[static_cast<std::size_t>(stage)];
  return r;
}

namespace {

// The default cut: each stage of an even cut runs a few micro-batch steps of its layers, the pipeline
// gathers every layer's time and memory (5 floats a parameter: value, gradient, two optimizer moments,
// a layout copy; outputs kept for the micro-batches in flight), and world rank 0's choice is everyone's.
StagePartition measured_partition(const TrainOptions& o, const Layout& layout, const ModelConfig& config,
                                  const std::vector<bool>& kept, int s, const Communicator& pipeline,
                                  const Communicator& world, Context& ctx) {
  const int S = pipeline.size();
  const std::size_t layers = kept.size();
  // Each stage's probe runs an even share of the layers, parting no weight that layers share.
  const std::vector<double> ones(layers, 1.0);
  const std::vector<std::size_t> even = balanced_partition(ones, ones, S, kept);
  const LayerRange range = stage_range(even, s);
  std::vector<double> figures(2 * layers, 0.0);  // time of each layer, then memory
  {
    auto probe = make_model(o.model, config, ctx, range);
    probe->initialize(o.seed);
    MpiStageLink link(pipeline);
    const dims_t& in = probe->input_shape();
    const auto micro = static_cast<dnnl::memory::dim>(layout.batch / layout.micro_batches);
    Tensor input(plain_desc(s == 0 ? dims_t{micro, in[0], in[1], in[2]} : link.receive_dims()), ctx.engine());
    std::fill(input.data(), input.data() + input.bytes() / sizeof(float), 0.5f);
    Profiler profiler;
    constexpr int kWarmup = 1, kTimed = 2;
    for (int step = 0; step < kWarmup + kTimed; ++step) {
      if (step == kWarmup) probe->attach_profiler(&profiler);
      const Tensor& out = probe->forward(ctx, input, Mode::train);
      if (step == 0 && link.has_next()) link.send_dims(out.dims());
      Tensor diff(out.desc(), ctx.engine());
      std::fill(diff.data(), diff.data() + diff.bytes() / sizeof(float), 1e-3f);
      probe->backward(ctx, diff);
      probe->release_input_gradient(ctx);
    }
    const double in_flight = std::min(layout.micro_batches, S);
    for (std::size_t i = 0; i < probe->num_layers(); ++i) {
      const auto& e = profiler.entries()[i];
      figures[range.begin + i] = (e.forward_s + e.backward_s) / kTimed;
      figures[layers + range.begin + i] = 5.0 * sizeof(float) * static_cast<double>(probe->layer_param_count(i)) +
                                          in_flight * static_cast<double>(probe->output_descs()[i].get_size());
    }
  }
  pipeline.allreduce_sum(figures);
  const std::vector<double> time(figures.begin(), figures.begin() + static_cast<std::ptrdiff_t>(layers));
  const std::vector<double> memory(figures.begin() + static_cast<std::ptrdiff_t>(layers), figures.end());
  const auto chosen = balanced_partition(time, memory, S, kept);
  std::vector<float> shared(chosen.begin(), chosen.end());
  world.broadcast(shared, 0);
  StagePartition result{{shared.begin(), shared.end()}, {}};
  const auto& counts = result.counts;
  // The report: each stage's share of the measured time and memory.
  double total_t = 0, total_m = 0;
  for (std::size_t i = 0; i < layers; ++i) {
    total_t += time[i];
    total_m += memory[i];
  }
  char line[160];
  for (int st = 0; st < S; ++st) {
    const LayerRange r = stage_range(counts, st);
    double t = 0, m = 0;
    for (std::size_t i = r.begin; i < r.end; ++i) {
      t += time[i];
      m += memory[i];
    }
    std::snprintf(line, sizeof line, "  stage %d: layers %zu-%zu, %.0f%% of the measured time, %.0f%% of the memory\n",
                  st, r.begin, r.end - 1, 100 * t / total_t, 100 * m / total_m);
    result.report += line;
  }
  return result;
}

}  // namespace

StagePartition choose_partition(const TrainOptions& o, const Layout& layout, const ModelConfig& config,
                                const Model& whole, int stage, const Communicator& pipeline, const Communicator& world,
                                Context& ctx) {
  const std::size_t layers = whole.num_layers();
  const int S = pipeline.size();
  if (S == 1) return {{layers}, {}};
  if (static_cast<std::size_t>(S) > layers)
    throw InputError(std::to_string(S) + " pipeline stages for model " + o.model + " of " + std::to_string(layers) +
                     " layers: at most one stage per layer");
  if (layout.cut.empty())
    return measured_partition(o, layout, config, whole.kept_with_previous(layers), stage, pipeline, world, ctx);
  check_partition(layout.cut, layers, S);
  StagePartition result{layout.cut, {}};
  for (int st = 0; st < S; ++st) {
    const LayerRange r = stage_range(layout.cut, st);
    result.report += "  stage " + std::to_string(st) + ": layers " + std::to_string(r.begin) + "-" +
                            std::to_string(r.end - 1) + " (--partition)\n";
  }
  return result;
}

}  // namespace ddl
