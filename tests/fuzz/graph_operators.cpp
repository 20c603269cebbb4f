// Fuzz target: a graph of the registry's operators (core/graph/) made from the input's bytes, as a graph layer
// runs it: an input's dims, parameters and constants of drawn dims, then operators of drawn types, each reading
// earlier values, with attributes and integer inputs drawn too. Set-up, forward and backward in training must
// succeed or end in an InputError (inputs that do not fit an operator, as a damaged file's would), never crash,
// read out of bounds or throw anything else.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/graph/graph_layer.hpp"
#include "core/graph/operator_registry.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace ddl::fuzz {
namespace {

constexpr int kMaxDim = 5;

dims_t draw_dims(FuzzedDataProvider& in, int min_rank, int max_rank) {
  dims_t dims(in.ConsumeIntegralInRange(min_rank, max_rank));
  for (auto& d : dims) d = in.ConsumeIntegralInRange(1, kMaxDim);
  return dims;
}

std::vector<std::int64_t> draw_list(FuzzedDataProvider& in, std::int64_t low, std::int64_t high) {
  std::vector<std::int64_t> list(in.ConsumeIntegralInRange(0, 4));
  for (auto& v : list) v = in.ConsumeIntegralInRange(low, high);
  return list;
}

// Every registered type, family by family.
std::vector<std::string_view> all_types() {
  std::vector<std::string_view> types;
  for (const auto family : {elementwise_operators, normalization_operators, shape_operators, reduction_operators,
                            matrix_operators, convolution_operators, resampling_operators})
    for (const OperatorRecord& record : family()) types.push_back(record.type);
  return types;
}

// An operator of a drawn type on drawn values, with the attributes operators read drawn small.
OpSpec draw_operator(FuzzedDataProvider& in, const std::vector<std::string_view>& types, int values) {
  OpSpec spec;
  spec.type = std::string(types[in.ConsumeIntegralInRange<std::size_t>(0, types.size() - 1)]);
  spec.name = "fuzz: " + spec.type + " node";
  const int inputs = in.ConsumeIntegralInRange(1, 3);
  for (int i = 0; i < inputs; ++i) {
    if (i > 0 && in.ConsumeBool()) {  // an integer input known before the graph runs: a shape, axes, bounds
      spec.inputs.push_back(-1);
      const auto list = draw_list(in, -kMaxDim, kMaxDim);
      spec.integers[i] = {list.size() == 1 && in.ConsumeBool() ? dims_t{} : dims_t{static_cast<std::int64_t>(list.size())},
                          list};
    } else {
      spec.inputs.push_back(in.ConsumeIntegralInRange(0, values - 1));
    }
  }
  for (const char* name : {"axis", "keepdims", "group", "transB", "num_groups", "ceil_mode"})
    if (in.ConsumeBool()) spec.attributes[name].ints = {in.ConsumeIntegralInRange(-4, 4)};
  for (const char* name : {"axes", "perm", "kernel_shape", "strides", "pads", "dilations", "output_padding"})
    if (in.ConsumeBool()) spec.attributes[name].ints = draw_list(in, 0, 3);
  for (const char* name : {"alpha", "beta", "epsilon", "ratio", "momentum"})
    if (in.ConsumeBool()) spec.attributes[name].floats = {in.ConsumeFloatingPointInRange(-2.0f, 2.0f)};
  if (in.ConsumeBool()) spec.attributes["mode"].text = in.PickValueInArray({"constant", "reflect", "edge", "nearest", "linear"});
  return spec;
}

void run_graph(FuzzedDataProvider& in) {
  static const std::vector<std::string_view> types = all_types();
  const dims_t input = draw_dims(in, 1, 4);
  std::vector<ParamSpec> params;
  for (int p = in.ConsumeIntegralInRange(0, 2); p > 0; --p) params.push_back({"p", draw_dims(in, 1, 4), Init::zeros});
  std::vector<GraphConstant> constants;
  for (int c = in.ConsumeIntegralInRange(0, 2); c > 0; --c) {
    GraphConstant constant{draw_dims(in, 0, 2), {}, in.ConsumeBool()};
    constant.values.assign(product(constant.dims), in.ConsumeFloatingPointInRange(-1.0f, 1.0f));
    constants.push_back(std::move(constant));
  }
  std::vector<OpSpec> ops;
  int values = 1 + static_cast<int>(params.size() + constants.size());
  for (int k = in.ConsumeIntegralInRange(1, 4); k > 0; --k) ops.push_back(draw_operator(in, types, values++));
  GraphLayer layer(params, std::move(constants), std::move(ops));

  Context ctx;
  std::vector<AlignedBuffer<float>> held;
  std::vector<ParamView> views;
  for (const ParamSpec& p : params) {
    held.emplace_back(product(p.dims));
    held.emplace_back(product(p.dims));
    for (float& v : held[held.size() - 2].span()) v = 0.25f;
    views.push_back({held[held.size() - 2].span(), held.back().span()});
  }
  layer.bind(views, ctx);
  const dnnl::memory::desc out = layer.setup(ctx, plain_desc(input), Mode::train, true);
  Tensor x(plain_desc(input), ctx.engine()), dy(out, ctx.engine());
  for (std::size_t i = 0; i < product(input); ++i) x.data()[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  std::fill(dy.data(), dy.data() + product(dims_of(out)), 1.0f);
  layer.forward(ctx, x);
  layer.backward(ctx, dy);
}

}  // namespace
}  // namespace ddl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  ddl::fuzz::expect_success_or_input_error([&] { ddl::fuzz::run_graph(in); });
  return 0;
}
