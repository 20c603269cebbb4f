// One model's training step in isolation: random images, forward, loss, backward, SGD with momentum, on
// `threads` OpenMP threads; prints seconds per step, images/s and peak memory, and with --profile each
// top-level layer's share. The ddl half of bench/models_vs_pytorch.sh (bench/torch_model_step.py is the
// other). --bf16: convolutions, dense layers and matrix products compute in bf16, as `ddl_train
// --precision bf16`.
//   model_step MODEL|FILE.onnx [batch=32] [steps=5] [threads=0: all] [--profile] [--bf16]
#include <malloc.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/cpu_bf16.hpp"
#include "core/layers/softmax_cross_entropy.hpp"
#include "core/optim/optimizer.hpp"
#include "core/rng.hpp"
#include "core/train/resources.hpp"
#include "models/onnx/graph_model.hpp"
#include "models/registry.hpp"

int main(int argc, char** argv) {
  using namespace ddl;
  if (argc < 2) {
    std::fprintf(stderr, "usage: model_step MODEL [batch=32] [steps=5] [threads=0] [--profile] [--bf16]\n");
    return 2;
  }
  const std::string name = argv[1];
  const int batch = argc > 2 ? std::atoi(argv[2]) : 32, steps = argc > 3 ? std::atoi(argv[3]) : 5;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 0;
  bool profile = false, bf16 = false;
  for (int i = 5; i < argc; ++i) {
    profile |= std::strcmp(argv[i], "--profile") == 0;
    bf16 |= std::strcmp(argv[i], "--bf16") == 0;
  }
  if (bf16 && !cpu_computes_bf16()) {
    std::fprintf(stderr, "model_step: --bf16: this CPU has neither AVX512-BF16 nor AMX\n");
    return 2;
  }
  if (threads > 0) omp_set_num_threads(threads);
  try {
    Context ctx;
    if (bf16) ctx.set_compute_type(dnnl::memory::data_type::bf16);
    ModelConfig config{.num_classes = 1000, .seed = 1};
    if (is_graph_file(name)) config.graph = read_graph_file(name);  // an ONNX graph (docs/onnx.md)
    auto model = make_model(name, config, ctx);
    model->initialize(1);
    // As ddl_train does once its models hold a graph's weights (Job::forget_graph_weights).
    config.graph.reset();
    malloc_trim(0);
    auto sgd = make_sgd(model->param_count(), {.momentum = 0.9f});
    const dims_t& s = model->input_shape();
    Tensor x(plain_desc({batch, s[0], s[1], s[2]}), ctx.engine());
    Rng rng(2);
    for (std::size_t i = 0; i < x.elements(); ++i) x.data()[i] = rng.normal();
    std::vector<std::int32_t> labels(batch);
    for (int i = 0; i < batch; ++i) labels[i] = static_cast<std::int32_t>(rng.below(1000));
    SoftmaxCrossEntropy loss;
    Profiler profiler;
    auto step = [&] {
      ctx.begin_step(0);
      loss.forward(ctx, model->forward(ctx, x, Mode::train), labels);
      model->backward(ctx, loss.backward());
      sgd->step(model->params(), model->grads(), 0.01f);
    };
    // Set-up, the two steps the buffer pool learns the requests from, and the first step served from what
    // it learned, which allocates its buffers.
    for (int i = 0; i < 4; ++i) step();
    if (profile) model->attach_profiler(&profiler);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    std::printf("ddl %s %s batch %d threads %d: %.3f s/step, %.1f images/s, peak RSS %.0f MB, %zu parameters\n",
                name.c_str(), bf16 ? "bf16" : "f32", batch, omp_get_max_threads(), seconds, batch / seconds,
                static_cast<double>(peak_resident_bytes()) / (1 << 20), model->param_count());
    if (profile)
      for (const auto& e : profiler.entries())
        std::printf("  %-40s fwd %8.1f ms  bwd %8.1f ms  %5.1f%%\n", e.layer.c_str(), 1e3 * e.forward_s / steps,
                    1e3 * e.backward_s / steps, 100.0 * (e.forward_s + e.backward_s) / (seconds * steps));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
