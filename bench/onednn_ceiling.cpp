// The ceiling for seed_cnn's training step: the same oneDNN primitives ddl runs, chained by hand with no
// framework around them: every layout is oneDNN's choice, weights stay in its blocked layouts (no
// reorders), no loss, no optimizer, no data loading. Prints images/s and the time of each layer's
// forward and backward, to set against `ddl_train --profile`. In bf16 every activation and its gradient
// is bf16 between the layers, the weights bf16 and their gradients f32: the most a bf16 chain can do (its
// input and logits are bf16 too, where ddl converts f32 images and gives f32 logits to the loss).
//   onednn_ceiling [batch=64] [steps=200] [f32|bf16]
#include <oneapi/dnnl/dnnl.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/onednn_api.hpp"

using namespace dnnl;
using namespace ddl;  // the oneDNN 2/3 compatible primitive descriptor makers
using tag = memory::format_tag;
using dt = memory::data_type;
using args_t = std::unordered_map<int, memory>;

namespace {

struct Timed {
  std::string layer;
  bool backward;
  std::function<void()> run;
  double seconds = 0;
};


}  // namespace

int main(int argc, char** argv) {
  const memory::dim N = argc > 1 ? std::stol(argv[1]) : 64;
  const int steps = argc > 2 ? std::stoi(argv[2]) : 200;
  const std::string precision = argc > 3 ? argv[3] : "f32";
  if (precision != "f32" && precision != "bf16") {
    std::fprintf(stderr, "onednn_ceiling: the precision is f32 or bf16, not %s\n", precision.c_str());
    return 2;
  }
  const dt act = precision == "bf16" ? dt::bf16 : dt::f32;  // activations, their gradients, weights
  auto any = [&](const memory::dims& d) { return memory::desc(d, act, tag::any); };
  auto any_f32 = [](const memory::dims& d) { return memory::desc(d, dt::f32, tag::any); };  // gradients of weights
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::vector<Timed> plan;
  auto add = [&](const char* layer, bool bwd, primitive p, args_t a) {
    plan.push_back({layer, bwd, [p, a, &s] { p.execute(s, a); }});
  };
  post_ops relu_ops;
  append_eltwise(relu_ops, algorithm::eltwise_relu, 0.f, 0.f);
  primitive_attr relu_attr;
  relu_attr.set_post_ops(relu_ops);
  const auto relu_bwd = algorithm::eltwise_relu_use_dst_for_bwd;

  // Convolution + ReLU with its backward pieces.
  // Each layer writes its input gradient straight into the previous layer's output-gradient buffer
  // (`diff_src`, empty for the first layer), as in a real chain.
  struct Conv {
    memory dst, diff_dst;
  };
  auto conv = [&](const char* name, memory src, memory diff_src, memory::dim ic, memory::dim oc, memory::dim hw,
                  std::vector<Timed>& backward) {
    const memory::dims src_d = {N, ic, hw, hw}, w_d = {oc, ic, 3, 3}, b_d = {oc}, dst_d = {N, oc, hw, hw};
    const memory::dims st = {1, 1}, no_dilation = {0, 0}, pad = {1, 1};
    const auto fpd =
        make_conv_forward_pd(eng, prop_kind::forward_training, algorithm::convolution_direct, src.get_desc(), any(w_d),
                             any_f32(b_d), any(dst_d), st, no_dilation, pad, pad, relu_attr);
    memory w(fpd.weights_desc(), eng), b(fpd.bias_desc(), eng), dst(fpd.dst_desc(), eng);
    add(name, false, convolution_forward(fpd),
        {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, dst}});
    Conv c{dst, memory(fpd.dst_desc(), eng)};
    memory diff_pre(fpd.dst_desc(), eng);
    const auto hint = make_eltwise_forward_pd(eng, prop_kind::forward_training, relu_bwd, fpd.dst_desc());
    const auto rpd = make_eltwise_backward_pd(eng, relu_bwd, fpd.dst_desc(), fpd.dst_desc(), 0.f, 0.f, hint);
    backward.push_back(
        {name, true,
         [p = eltwise_backward(rpd),
          a = args_t{{DNNL_ARG_DST, dst}, {DNNL_ARG_DIFF_DST, c.diff_dst}, {DNNL_ARG_DIFF_SRC, diff_pre}},
          &s] { p.execute(s, a); }});
    const auto wpd = make_conv_backward_weights_pd(eng, algorithm::convolution_direct, src.get_desc(), any_f32(w_d),
                                                   any_f32(b_d), fpd.dst_desc(), st, no_dilation, pad, pad, fpd);
    memory dw(wpd.diff_weights_desc(), eng), db(wpd.diff_bias_desc(), eng);
    backward.push_back({name, true,
                        [p = convolution_backward_weights(wpd),
                         a = args_t{{DNNL_ARG_SRC, src},
                                    {DNNL_ARG_DIFF_DST, diff_pre},
                                    {DNNL_ARG_DIFF_WEIGHTS, dw},
                                    {DNNL_ARG_DIFF_BIAS, db}},
                         &s] { p.execute(s, a); }});
    if (diff_src) {
      const auto dpd = make_conv_backward_data_pd(eng, algorithm::convolution_direct, src.get_desc(), any(w_d),
                                                  fpd.dst_desc(), st, no_dilation, pad, pad, fpd);
      memory wd = dpd.weights_desc() == fpd.weights_desc() ? w : memory(dpd.weights_desc(), eng);
      backward.push_back(
          {name, true,
           [p = convolution_backward_data(dpd),
            a = args_t{{DNNL_ARG_DIFF_DST, diff_pre}, {DNNL_ARG_WEIGHTS, wd}, {DNNL_ARG_DIFF_SRC, diff_src}},
            &s] { p.execute(s, a); }});
    }
    return c;
  };
  struct Pool {
    memory dst, diff_dst;
  };
  auto pool = [&](const char* name, memory src, memory diff_src, std::vector<Timed>& backward) {
    memory::dims d = dims_of(src.get_desc());
    const memory::dims dst_d = {d[0], d[1], d[2] / 2, d[3] / 2}, k = {2, 2}, pad = {0, 0};
    const auto fpd = make_pooling_forward_pd(eng, prop_kind::forward_training, algorithm::pooling_max, src.get_desc(),
                                             any(dst_d), k, k, pad, pad);
    memory dst(fpd.dst_desc(), eng), ws(fpd.workspace_desc(), eng), diff_dst(fpd.dst_desc(), eng);
    add(name, false, pooling_forward(fpd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_WORKSPACE, ws}});
    const auto bpd =
        make_pooling_backward_pd(eng, algorithm::pooling_max, src.get_desc(), fpd.dst_desc(), k, k, pad, pad, fpd);
    backward.push_back(
        {name, true,
         [p = pooling_backward(bpd),
          a = args_t{{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WORKSPACE, ws}, {DNNL_ARG_DIFF_SRC, diff_src}},
          &s] { p.execute(s, a); }});
    return Pool{dst, diff_dst};
  };
  struct Dense {
    memory dst, diff_dst;
  };
  auto dense = [&](const char* name, memory src, memory diff_src, memory::dim in, memory::dim out, bool relu,
                   std::vector<Timed>& backward) {
    const memory::dims w_d = {out, in}, b_d = {out}, dst_d = {N, out};
    memory::desc dst_md(dst_d, act, tag::ab);
    const auto fpd = make_inner_product_forward_pd(eng, prop_kind::forward_training, src.get_desc(), any(w_d),
                                                   any_f32(b_d), dst_md, relu ? relu_attr : primitive_attr());
    memory w(fpd.weights_desc(), eng), b(fpd.bias_desc(), eng), dst(dst_md, eng);
    add(name, false, inner_product_forward(fpd),
        {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, dst}});
    Dense d{dst, memory(dst_md, eng)};
    memory grad = d.diff_dst;
    if (relu) {
      memory pre(dst_md, eng);
      const auto hint = make_eltwise_forward_pd(eng, prop_kind::forward_training, relu_bwd, dst_md);
      const auto rpd = make_eltwise_backward_pd(eng, relu_bwd, dst_md, dst_md, 0.f, 0.f, hint);
      backward.push_back({name, true,
                          [p = eltwise_backward(rpd),
                           a = args_t{{DNNL_ARG_DST, dst}, {DNNL_ARG_DIFF_DST, d.diff_dst}, {DNNL_ARG_DIFF_SRC, pre}},
                           &s] { p.execute(s, a); }});
      grad = pre;
    }
    const auto wpd =
        make_inner_product_backward_weights_pd(eng, src.get_desc(), any_f32(w_d), any_f32(b_d), dst_md, fpd);
    memory dw(wpd.diff_weights_desc(), eng), db(wpd.diff_bias_desc(), eng);
    backward.push_back({name, true,
                        [p = inner_product_backward_weights(wpd),
                         a = args_t{{DNNL_ARG_SRC, src},
                                    {DNNL_ARG_DIFF_DST, grad},
                                    {DNNL_ARG_DIFF_WEIGHTS, dw},
                                    {DNNL_ARG_DIFF_BIAS, db}},
                         &s] { p.execute(s, a); }});
    const auto dpd = make_inner_product_backward_data_pd(eng, src.get_desc(), any(w_d), dst_md, fpd);
    memory wd = dpd.weights_desc() == fpd.weights_desc() ? w : memory(dpd.weights_desc(), eng);
    backward.push_back({name, true,
                        [p = inner_product_backward_data(dpd),
                         a = args_t{{DNNL_ARG_DIFF_DST, grad}, {DNNL_ARG_WEIGHTS, wd}, {DNNL_ARG_DIFF_SRC, diff_src}},
                         &s] { p.execute(s, a); }});
    return d;
  };

  // Backward pieces are collected per layer and replayed last layer first.
  std::vector<std::vector<Timed>> bwd(7);
  memory input({{N, 3, 32, 32}, act, tag::nchw}, eng);
  Conv c1 = conv("conv1", input, memory(), 3, 32, 32, bwd[0]);
  Pool p1 = pool("pool1", c1.dst, c1.diff_dst, bwd[1]);
  Conv c2 = conv("conv2", p1.dst, p1.diff_dst, 32, 64, 16, bwd[2]);
  Pool p2 = pool("pool2", c2.dst, c2.diff_dst, bwd[3]);
  memory flat({{N, 64 * 8 * 8}, act, tag::ab}, eng), diff_flat({{N, 64 * 8 * 8}, act, tag::ab}, eng);
  memory flat_4d({{N, 64, 8, 8}, act, tag::nchw}, eng, flat.get_data_handle());
  memory diff_flat_4d({{N, 64, 8, 8}, act, tag::nchw}, eng, diff_flat.get_data_handle());
  add("flatten", false, reorder(p2.dst, flat_4d), {{DNNL_ARG_FROM, p2.dst}, {DNNL_ARG_TO, flat_4d}});
  bwd[4].push_back({"flatten", true,
                    [p = reorder(diff_flat_4d, p2.diff_dst),
                     a = args_t{{DNNL_ARG_FROM, diff_flat_4d}, {DNNL_ARG_TO, p2.diff_dst}}, &s] { p.execute(s, a); }});
  Dense d1 = dense("dense1", flat, diff_flat, 4096, 64, true, bwd[5]);
  dense("dense2", d1.dst, d1.diff_dst, 64, 10, false, bwd[6]);
  for (int l = 6; l >= 0; --l)
    for (auto& t : bwd[l]) plan.push_back(std::move(t));

  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 10; ++i)
    for (auto& t : plan) t.run();
  s.wait();
  const auto t0 = clock::now();
  for (int i = 0; i < steps; ++i)
    for (auto& t : plan) {
      const auto a = clock::now();
      t.run();
      t.seconds += std::chrono::duration<double>(clock::now() - a).count();
    }
  s.wait();
  const double total = std::chrono::duration<double>(clock::now() - t0).count();
  std::printf("oneDNN-only training step of seed_cnn, %s, batch %ld: %.0f images/s (%.3f ms per step)\n",
              precision.c_str(), static_cast<long>(N), N * steps / total, 1e3 * total / steps);
  std::printf("  %-10s %10s %10s\n", "layer", "fwd ms", "bwd ms");
  for (const char* layer : {"conv1", "pool1", "conv2", "pool2", "flatten", "dense1", "dense2"}) {
    double f = 0, b = 0;
    for (const auto& t : plan)
      if (t.layer == layer) (t.backward ? b : f) += t.seconds;
    std::printf("  %-10s %10.3f %10.3f\n", layer, 1e3 * f / steps, 1e3 * b / steps);
  }
  return 0;
}
