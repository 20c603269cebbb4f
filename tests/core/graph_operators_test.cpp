// The graph's operators family by family (core/graph/*.cpp): each operator's backward against finite
// differences, table-driven, and forwards against values worked out by hand or by their formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <numeric>
#include <optional>

#include "core/error.hpp"
#include "core/graph/operator_registry.hpp"
#include "tests/core/gradient_check.hpp"
#include "tests/core/graph_builder.hpp"

namespace ddl::test {
namespace {

struct Case {
  std::string what;
  dims_t input;
  std::function<std::unique_ptr<GraphLayer>()> graph;
  GradientCheckOptions options = {};
};

void check_all(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto layer = c.graph();
    EXPECT_EQ(check_gradients(*layer, c.input, c.options), 0u) << c.what;
  }
}

// One operator on the input (and the given parameters and constants), its output multiplied by the input's
// own first element's row so that every input value matters (a piece's output is a tensor of rank >= 1).
std::function<std::unique_ptr<GraphLayer>()> one(const std::string& type, std::vector<int> inputs,
                                                 std::map<std::string, OpAttribute> attributes = {},
                                                 std::map<std::size_t, IntegerInput> integers = {},
                                                 std::vector<ParamSpec> params = {},
                                                 std::vector<GraphConstant> constants = {}) {
  return [=] {
    GraphBuilder g(params, constants);
    g.add(type, inputs, attributes, integers);
    return g.make();
  };
}

// Away from kinks: finite differences across them differ from either slope.
constexpr GradientCheckOptions kFine = {.step = 1e-3f, .abs_tolerance = 3e-3f, .rel_tolerance = 3e-2f};

TEST(GraphOperatorsGradient, ElementWise) {
  std::vector<Case> cases;
  for (const char* type : {"Relu", "Elu", "Sigmoid", "Tanh", "Abs", "Mish", "Gelu", "HardSwish", "Erf", "Neg",
                           "Softplus", "Softsign", "Selu", "Celu", "HardSigmoid", "Exp"})
    cases.push_back({type, {2, 3, 5}, one(type, {0}), kFine});
  cases.push_back({"LeakyRelu", {2, 3, 5}, one("LeakyRelu", {0}, {{"alpha", real(0.2f)}}), kFine});
  cases.push_back({"Gelu tanh", {2, 3, 5}, one("Gelu", {0}, {{"approximate", text("tanh")}}), kFine});
  cases.push_back({"Clip", {2, 3, 5}, one("Clip", {0, 1, 2}, {}, {}, {}, {{{}, {-0.3f}}, {{}, {0.4f}}}), kFine});
  // Log, Sqrt and Reciprocal of positive numbers: the input squared plus one first.
  for (const char* type : {"Log", "Sqrt", "Reciprocal"})
    cases.push_back({type, {2, 3, 5}, [type] {
                       GraphBuilder g({}, {{{}, {1.0f}}});
                       g.add(type, {g.add("Add", {g.add("Mul", {0, 0}), 1})});
                       return g.make();
                     }});
  for (const char* type : {"Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu"})
    cases.push_back({std::string(type) + " by a broadcast parameter", {2, 3, 5},
                     [type] {
                       GraphBuilder g({param("p", {3, 1})}, {});
                       g.add(type, {0, 1});
                       return g.make();
                     },
                     {.step = 1e-3f, .abs_tolerance = 3e-3f, .rel_tolerance = 3e-2f, .param_scale = 2.0f}});
  cases.push_back({"Pow by a computed exponent", {2, 3, 5}, [] {
                     GraphBuilder g({param("e", {5})}, {{{}, {1.5f}}});
                     const int base = g.add("Add", {g.add("Mul", {0, 0}), 2});
                     g.add("Pow", {base, 1});
                     return g.make();
                   }});
  // Where with a mask known before the graph runs (swin_t's), and with a computed one.
  cases.push_back({"Where", {2, 3, 4}, [] {
                     GraphBuilder g({param("other", {4})}, {});
                     g.add("Where", {-1, 0, 1}, {}, {{0, {{3, 1}, {1, 0, 1}}}});
                     return g.make();
                   }});
  // A comparison's 1s and 0s as Where's condition (a leaky ReLU written out): the gradient flows through the
  // branch taken, none through the comparison.
  cases.push_back({"Where of a Greater", {2, 3, 4}, [] {
                     GraphBuilder g({}, {{{}, {0.0f}}, {{}, {0.1f}}});
                     g.add("Where", {g.add("Greater", {0, 1}), 0, g.add("Mul", {0, 2})});
                     return g.make();
                   }, kFine});
  // Mod of the input times 5 by a computed divisor in [1, 2] or [-2, -1]: the slopes 1 and -floor(a / b)
  // (fmod 0) or -trunc(a / b) (fmod 1), PyTorch's, away from the jumps where a / b is whole.
  for (const std::int64_t fmod : {0, 1})
    for (const float shift : {1.5f, -1.5f})
      cases.push_back({"Mod, fmod " + std::to_string(fmod) + (shift > 0 ? ", divisor in [1, 2]" : ", divisor in [-2, -1]"),
                       {2, 3, 5},
                       [fmod, shift] {
                         GraphBuilder g({param("b", {5})}, {{{}, {5.0f}}, {{}, {shift}}});
                         g.add("Mod", {g.add("Mul", {0, 2}), g.add("Add", {1, 3})}, {{"fmod", ints({fmod})}});
                         return g.make();
                       },
                       kFine});
  check_all(cases);
}

TEST(GraphOperatorsGradient, Reductions) {
  std::vector<Case> cases;
  for (const char* type : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare",
                           "ReduceLogSumExp"}) {
    cases.push_back({std::string(type) + " over axes 1 and 3, kept", {2, 3, 4, 5},
                     one(type, {0}, {{"axes", ints({1, -1})}}), kFine});
    cases.push_back({std::string(type) + " over all but the batch, dropped", {2, 3, 4},
                     one(type, {0}, {{"axes", ints({1, 2})}, {"keepdims", ints({0})}}), kFine});
  }
  cases.push_back({"ReduceSum with its axes an input (opset 13)", {2, 3, 4},
                   one("ReduceSum", {0, -1}, {{"keepdims", ints({0})}}, {{1, integers({1})}})});
  for (const std::int64_t exclusive : {0, 1})
    for (const std::int64_t reverse : {0, 1})
      for (const std::int64_t axis : {1, -1})
        cases.push_back({"CumSum along " + std::to_string(axis) + ", exclusive " + std::to_string(exclusive) +
                             ", reverse " + std::to_string(reverse),
                         {2, 3, 4},
                         one("CumSum", {0, -1}, {{"exclusive", ints({exclusive})}, {"reverse", ints({reverse})}},
                             {{1, integers({axis}, true)}})});
  cases.push_back({"GlobalAveragePool", {2, 3, 4, 5}, one("GlobalAveragePool", {0})});
  cases.push_back({"GlobalMaxPool", {2, 3, 4, 5}, one("GlobalMaxPool", {0}), kFine});
  for (const std::int64_t axis : {1, -1}) {
    cases.push_back({"Softmax along " + std::to_string(axis), {2, 3, 4}, one("Softmax", {0}, {{"axis", ints({axis})}})});
    cases.push_back({"LogSoftmax along " + std::to_string(axis), {2, 3, 4}, one("LogSoftmax", {0}, {{"axis", ints({axis})}})});
  }
  check_all(cases);
}

TEST(GraphOperatorsGradient, Normalisation) {
  std::vector<Case> cases;
  cases.push_back({"InstanceNormalization", {2, 3, 4, 5},
                   one("InstanceNormalization", {0, 1, 2}, {{"epsilon", real(1e-3f)}}, {}, {param("s", {3}), param("b", {3})})});
  // GroupNorm as PyTorch exports it: a Reshape to [N, groups, -1], InstanceNormalization with constant ones
  // and zeros, a Reshape back, a per-channel Mul and Add.
  cases.push_back({"GroupNorm as exported", {2, 4, 3, 3}, [] {
                     GraphBuilder g({param("weight", {4, 1, 1}), param("bias", {4, 1, 1})}, {{{2}, {1, 1}}, {{2}, {0, 0}}});
                     const int groups = g.add("Reshape", {0, -1}, {}, {{1, integers({0, 2, -1})}});
                     const int normal = g.add("InstanceNormalization", {groups, 3, 4}, {{"epsilon", real(1e-3f)}});
                     const int back = g.add("Reshape", {normal, -1}, {}, {{1, integers({0, 4, 3, 3})}});
                     g.add("Add", {g.add("Mul", {back, 1}), 2});
                     return g.make();
                   }});
  cases.push_back({"GroupNormalization, 2 groups of 3 channels", {2, 6, 2, 3},
                   one("GroupNormalization", {0, 1, 2}, {{"num_groups", ints({2})}, {"epsilon", real(1e-3f)}}, {},
                       {param("s", {6}), param("b", {6})})});
  // Batch statistics in training; the running mean and variance are state the operator moves.
  const auto batch_norm = [](dims_t running) {
    return one("BatchNormalization", {0, 1, 2, 3, 4}, {{"epsilon", real(1e-3f)}}, {}, {param("s", {3}), param("b", {3})},
               {{running, {0.1f, 0.2f, 0.3f}, true}, {running, {1.0f, 2.0f, 0.5f}, true}});
  };
  cases.push_back({"BatchNormalization of [N, C, H, W]", {4, 3, 2, 2}, batch_norm({3})});
  cases.push_back({"BatchNormalization of [N, C] (BatchNorm1d)", {5, 3}, batch_norm({3})});
  cases.push_back({"LayerNormalization from axis 1, without a shift", {2, 3, 4},
                   one("LayerNormalization", {0, 1}, {{"axis", ints({1})}, {"epsilon", real(1e-3f)}}, {}, {param("s", {3, 4})})});
  check_all(cases);
}

TEST(GraphOperatorsGradient, ShapeAndIndexing) {
  std::vector<Case> cases;
  cases.push_back({"Slice with a negative step and bounds from the back", {2, 5, 6},
                   one("Slice", {0, -1, -1, -1, -1}, {},
                       {{1, integers({-1, 4})}, {2, integers({-7, 0})}, {3, integers({1, 2})}, {4, integers({-2, -3})}})});
  cases.push_back({"Tile", {2, 3, 2}, one("Tile", {0, -1}, {}, {{1, integers({1, 2, 3})}})});
  cases.push_back({"Gather of an index twice", {2, 5, 3},
                   one("Gather", {0, -1}, {{"axis", ints({1})}}, {{1, integers({4, 1, -1})}})});
  // Indices computed on the images arrive as a value of whole numbers (here a constant one, [2, 2]).
  cases.push_back({"Gather at indices that are a value, one twice",
                   {2, 5, 3},
                   one("Gather", {0, 1}, {{"axis", ints({-2})}}, {}, {}, {{{2, 2}, {4.0f, 1.0f, -1.0f, 1.0f}}})});
  cases.push_back({"Flatten from axis 2", {2, 3, 4, 2}, one("Flatten", {0}, {{"axis", ints({2})}})});
  // x.float() passes the gradient; x.bool() * x and x.long() * x only through the second factor, as in PyTorch.
  cases.push_back({"Cast to float", {2, 3, 4}, one("Cast", {0}, {{"to", ints({1})}})});
  for (const std::int64_t to : {9, 7})
    cases.push_back({"Cast to " + std::to_string(to) + " times the input",
                     {2, 3, 4},
                     [to] {
                       GraphBuilder g({}, {});
                       g.add("Mul", {g.add("Cast", {0}, {{"to", ints({to})}}), 0});
                       return g.make();
                     },
                     kFine});
  cases.push_back({"Expand", {2, 1, 4}, one("Expand", {0, -1}, {}, {{1, integers({3, 1})}})});
  for (const char* mode : {"DCR", "CRD"})
    cases.push_back({std::string("DepthToSpace, ") + mode,
                     {2, 8, 2, 3},
                     one("DepthToSpace", {0}, {{"blocksize", ints({2})}, {"mode", text(mode)}})});
  cases.push_back({"SpaceToDepth", {2, 2, 4, 6}, one("SpaceToDepth", {0}, {{"blocksize", ints({2})}})});
  cases.push_back({"Trilu upper, k left out", {2, 3, 4, 5}, one("Trilu", {0})});
  cases.push_back({"Trilu lower, k -1", {2, 3, 4, 5}, one("Trilu", {0, -1}, {{"upper", ints({0})}}, {{1, integers({-1}, true)}})});
  cases.push_back({"Trilu upper, k 2", {2, 4, 3}, one("Trilu", {0, -1}, {{"upper", ints({1})}}, {{1, integers({2}, true)}})});
  for (const char* mode : {"constant", "reflect", "edge"})
    cases.push_back({std::string("Pad, ") + mode + ", a crop on one side", {2, 3, 4, 3},
                     one("Pad", {0, -1, 1}, {{"mode", text(mode)}}, {{1, integers({0, 1, 2, -1, 0, 0, 1, 2})}}, {},
                         {{{}, {0.5f}}})});
  check_all(cases);
}

TEST(GraphOperatorsGradient, ConvolutionAndPooling) {
  std::vector<Case> cases;
  cases.push_back({"Conv 3x2, strides 2x1, dilations 1x2, uneven pads, bias", {2, 3, 7, 8},
                   one("Conv", {0, 1, 2},
                       {{"strides", ints({2, 1})}, {"dilations", ints({1, 2})}, {"pads", ints({1, 0, 0, 2})}}, {},
                       {param("w", {4, 3, 3, 2}), param("b", {4})})});
  cases.push_back({"Conv in 2 groups, auto_pad SAME_UPPER", {2, 4, 5, 5},
                   one("Conv", {0, 1}, {{"group", ints({2})}, {"strides", ints({2, 2})}, {"auto_pad", text("SAME_UPPER")}},
                       {}, {param("w", {6, 2, 3, 3})})});
  // ConvTranspose's weight is [C_in, C_out / group, k...].
  cases.push_back({"ConvTranspose 3x3, stride 2, pads 1, output_padding 1, bias (nn.ConvTranspose2d)", {2, 3, 4, 4},
                   one("ConvTranspose", {0, 1, 2},
                       {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"output_padding", ints({1, 1})}}, {},
                       {param("w", {3, 4, 3, 3}), param("b", {4})})});
  cases.push_back({"ConvTranspose 2x3 in 2 groups, strides 2x1, dilations 1x2, uneven pads, output_padding, bias",
                   {2, 4, 3, 4},
                   one("ConvTranspose", {0, 1, 2},
                       {{"group", ints({2})}, {"strides", ints({2, 1})}, {"dilations", ints({1, 2})},
                        {"pads", ints({1, 0, 0, 2})}, {"output_padding", ints({1, 0})}},
                       {}, {param("w", {4, 3, 2, 3}), param("b", {6})})});
  cases.push_back({"ConvTranspose 1-d, stride 3, uneven pads, output_padding 2, bias", {2, 3, 5},
                   one("ConvTranspose", {0, 1, 2},
                       {{"strides", ints({3})}, {"pads", ints({2, 1})}, {"output_padding", ints({2})}}, {},
                       {param("w", {3, 2, 4}), param("b", {2})})});
  cases.push_back({"ConvTranspose 3-d, strides 2x1x2, dilations 1x1x2, pads", {1, 2, 3, 3, 2},
                   one("ConvTranspose", {0, 1, 2},
                       {{"strides", ints({2, 1, 2})}, {"dilations", ints({1, 1, 2})}, {"pads", ints({0, 1, 0, 1, 0, 0})}},
                       {}, {param("w", {2, 2, 2, 3, 2}), param("b", {2})})});
  cases.push_back({"ConvTranspose auto_pad SAME_LOWER, no bias", {2, 2, 3, 3},
                   one("ConvTranspose", {0, 1}, {{"strides", ints({2, 2})}, {"auto_pad", text("SAME_LOWER")}}, {},
                       {param("w", {2, 3, 3, 3})})});
  // Output rows past the last window's reach: only the bias lands there.
  cases.push_back({"ConvTranspose to an output_shape one row longer than its windows reach", {2, 2, 3, 4},
                   one("ConvTranspose", {0, 1, 2}, {{"strides", ints({2, 2})}, {"output_shape", ints({8, 9})}}, {},
                       {param("w", {2, 2, 3, 3}), param("b", {2})})});
  cases.push_back({"MaxPool 3x2, strides 2x1, ceil_mode", {2, 3, 7, 6},
                   one("MaxPool", {0}, {{"kernel_shape", ints({3, 2})}, {"strides", ints({2, 1})}, {"ceil_mode", ints({1})}}),
                   kFine});
  cases.push_back({"AveragePool 2x3, pads, count_include_pad", {2, 3, 6, 6},
                   one("AveragePool", {0},
                       {{"kernel_shape", ints({2, 3})}, {"pads", ints({1, 1, 0, 1})}, {"count_include_pad", ints({1})}})});
  cases.push_back({"AveragePool ceil_mode, padding not counted", {2, 3, 7, 7},
                   one("AveragePool", {0}, {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", ints({1})}})});
  check_all(cases);
}

TEST(GraphOperatorsGradient, Resampling) {
  std::vector<Case> cases;
  const std::vector<GraphConstant> twice = {{{0}, {}}, {{4}, {1, 1, 2, 2}}};  // roi, scales
  cases.push_back({"Resize nearest by 2 (nn.Upsample)", {2, 3, 3, 4},
                   one("Resize", {0, 1, 2}, {{"mode", text("nearest")}, {"coordinate_transformation_mode", text("asymmetric")},
                                             {"nearest_mode", text("floor")}}, {}, {}, twice)});
  for (const char* transform : {"pytorch_half_pixel", "half_pixel", "align_corners"})
    cases.push_back({std::string("Resize linear, ") + transform, {2, 3, 3, 4},
                     one("Resize", {0, 1, 2}, {{"mode", text("linear")}, {"coordinate_transformation_mode", text(transform)}},
                         {}, {}, twice)});
  cases.push_back({"Resize linear to sizes", {2, 3, 3, 4},
                   one("Resize", {0, -1, -1, -1}, {{"mode", text("linear")}}, {{3, integers({2, 3, 5, 7})}})});
  check_all(cases);
}

// Forwards worked out by hand.
std::vector<float> run_forward(GraphLayer& layer, const dims_t& dims, const std::vector<float>& x) {
  Context ctx;
  layer.bind({}, ctx);
  const auto out = layer.setup(ctx, plain_desc(dims), Mode::infer, false);
  Tensor in(plain_desc(dims), ctx.engine());
  std::copy(x.begin(), x.end(), in.data());
  const Tensor& y = layer.forward(ctx, in);
  return {y.data(), y.data() + product(dims_of(out))};
}

TEST(GraphOperatorsOutput, ResizeMatchesPyTorchsInterpolation) {
  // F.interpolate([[0, 1], [2, 3]], scale_factor=2, mode="bilinear", align_corners=False) and mode="nearest".
  GraphBuilder linear({}, {{{0}, {}}, {{4}, {1, 1, 2, 2}}});
  linear.add("Resize", {0, 1, 2}, {{"mode", text("linear")}, {"coordinate_transformation_mode", text("pytorch_half_pixel")}});
  GraphLayer bilinear = linear.build();
  const std::vector<float> expected = {0, 0.25, 0.75, 1, 0.5, 0.75, 1.25, 1.5, 1.5, 1.75, 2.25, 2.5, 2, 2.25, 2.75, 3};
  const auto y = run_forward(bilinear, {1, 1, 2, 2}, {0, 1, 2, 3});
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-6f) << i;
  GraphBuilder near({}, {{{0}, {}}, {{4}, {1, 1, 2, 2}}});
  near.add("Resize", {0, 1, 2}, {{"coordinate_transformation_mode", text("asymmetric")}, {"nearest_mode", text("floor")}});
  GraphLayer nearest = near.build();
  EXPECT_EQ(run_forward(nearest, {1, 1, 2, 2}, {0, 1, 2, 3}),
            (std::vector<float>{0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3}));
}

TEST(GraphOperatorsOutput, ConvTransposeMatchesPyTorchs) {
  // F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1): x [1, 2, 3, 3], w [2, 2, 3, 3].
  GraphBuilder plain({}, {{{2, 2, 3, 3}, {-0.75, 0.5,  0,     -0.5,  0.75, 0.25,  -0.25, -0.75, 0.5,   0,    -0.5, 0.75,
                                          0.25,  -0.25, -0.75, 0.5,   0,    -0.5,  0.75,  0.25,  -0.25, -0.75, 0.5,  0,
                                          -0.5,  0.75, 0.25,  -0.25, -0.75, 0.5,   0,     -0.5,  0.75,  0.25,  -0.25, -0.75}},
                          {{2}, {0.5, -1}}});
  plain.add("ConvTranspose", {0, 1, 2}, {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})},
                                         {"output_padding", ints({1, 1})}, {"kernel_shape", ints({3, 3})}});
  GraphLayer strided = plain.build();
  const std::vector<float> expected = {
      -0.625, -0.25,  1,      3.125,  -1.5,   0.25,   5,      -1.75,  -0.625, 5.625,  -0.75,  -1.25,  2.875,  1.625,
      0.375,  -0.5,   0.625,  0.125,  0.5,    1.125,  -1,     3,      3,      -0.125, 2.25,   2.125,  -0.25,  0,
      0,      0,      -0.625, 2.375,  -0.625, -0.375, 3.5,    0,      -1.125, 2.25,   -1,     -2.375, 0.5,    -2.125,
      -3.375, 2.125,  -0.375, -3,     -1.5,   1.5,    -2.125, -2,     -0.625, -2.5,   -1.875, 2,      -2.625, -0.875,
      0.375,  -1.875, -2.125, -2.625, -1.75,  -2.125, -0.25,  -2.625, -1.5,   2,      -1.125, -2.75,  -0.625, -0.375,
      -1.5,   -1.5};
  const auto y = run_forward(strided, {1, 2, 3, 3},
                             {-2.5, 1, -1, 2.5, 0.5, -1.5, 2, 0, -2, 1.5, -0.5, -2.5, 1, -1, 2.5, 0.5, -1.5, 2});
  ASSERT_EQ(y.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-5f) << i;

  // F.conv_transpose2d(x, w, stride=(2, 1), dilation=(1, 2), groups=2, output_padding=(1, 0))[:, :, 1:, :-2]:
  // ONNX's pads (1, 0) at the beginning and (0, 2) at the end. x [1, 4, 2, 3], w [4, 1, 2, 3].
  GraphBuilder grouped({}, {{{4, 1, 2, 3}, {-0.75, 0, 0.75, -0.25, 0.5, -0.5, 0.25, -0.75, 0, 0.75, -0.25, 0.5,
                                            -0.5, 0.25, -0.75, 0, 0.75, -0.25, 0.5, -0.5, 0.25, -0.75, 0, 0.75}}});
  grouped.add("ConvTranspose", {0, 1}, {{"group", ints({2})}, {"strides", ints({2, 1})}, {"dilations", ints({1, 2})},
                                        {"pads", ints({1, 0, 0, 2})}, {"output_padding", ints({1, 0})}});
  GraphLayer in_groups = grouped.build();
  const std::vector<float> expected_grouped = {
      0.125, 1.375,  -0.5,  -0.25, 0,     -1.25, 0.875, 0,     -0.375, 1.875, -1.75, 0.625, -0.5, -0.625,
      -0.375, 0,     0,     0,     0,     0,     1.5,   -0.375, 1.875, -0.75, -0.625, 0.75, -1.5, 0.125,
      1,     -0.125, -0.75, 0.75,  -1.5,  1.5,   0.875, 0,     0,     0,     0,     0};
  const auto z = run_forward(in_groups, {1, 4, 2, 3}, {-2, 0.5, -1.5, 1, -1, 1.5, -0.5, 2, 0, -2, 0.5, -1.5,
                                                       1, -1, 1.5, -0.5, 2, 0, -2, 0.5, -1.5, 1, -1, 1.5});
  ASSERT_EQ(z.size(), expected_grouped.size());
  for (std::size_t i = 0; i < expected_grouped.size(); ++i) EXPECT_NEAR(z[i], expected_grouped[i], 1e-5f) << i;
}

// What oneDNN's deconvolution cannot take is refused with one line that names the node, not computed wrong.
TEST(GraphOperatorsOutput, ConvTransposeRefusesWhatOneDnnCannotTake) {
  const auto refusal = [](dims_t weight, std::map<std::string, OpAttribute> attributes) -> std::string {
    OpSpec spec;
    spec.type = "ConvTranspose";
    spec.name = "net.onnx: ConvTranspose node 'up'";
    spec.inputs = {0, 1};
    spec.attributes = std::move(attributes);
    const OpValue x{{1, 2, 4, 4}}, w{std::move(weight)};
    const std::vector<const OpValue*> in = {&x, &w};
    try {
      const dims_t out = make_operator(spec)->output_dims(in, 1);
      return "none: " + shapes::text(out);
    } catch (const InputError& e) {
      return e.what();
    }
  };
  // PyTorch takes output_padding below the stride or the dilation; oneDNN below the stride plus the end pad.
  EXPECT_EQ(refusal({2, 3, 3, 3}, {{"dilations", ints({2, 2})}, {"output_padding", ints({1, 1})}}),
            "net.onnx: ConvTranspose node 'up': its output_padding 1 is not below its stride plus its end pad (oneDNN's)");
  EXPECT_EQ(refusal({2, 3, 3, 3}, {{"dilations", ints({2, 2})}, {"output_padding", ints({1, 1})}, {"pads", ints({0, 0, 1, 1})}}),
            "none: [1x3x8x8]");
  // 1x1 windows at stride 2 reach 7 rows of the 8 that SAME asks: the row missing is the first for SAME_UPPER
  // (a begin pad of -1), the last for SAME_LOWER (an end pad of -1, as output_padding 1 would be).
  EXPECT_EQ(refusal({2, 3, 1, 1}, {{"strides", ints({2, 2})}, {"auto_pad", text("SAME_UPPER")}}),
            "net.onnx: ConvTranspose node 'up': its output_shape or auto_pad asks for a negative begin pad, which "
            "oneDNN cannot take");
  EXPECT_EQ(refusal({2, 3, 1, 1}, {{"strides", ints({2, 2})}, {"auto_pad", text("SAME_LOWER")}}), "none: [1x3x8x8]");
  EXPECT_EQ(refusal({2, 3, 3, 3}, {{"strides", ints({2, 2})}, {"output_shape", ints({5, 5})}}), "none: [1x3x5x5]");
  EXPECT_EQ(refusal({2, 3, 3, 3}, {{"kernel_shape", ints({2, 2})}}),
            "net.onnx: ConvTranspose node 'up': its kernel_shape is not its weight's [2x3x3x3]");
}

TEST(GraphOperatorsOutput, ReductionsAndActivationsFollowTheirFormulas) {
  const std::vector<float> x = {1, -2, 3, 0.5f, 4, -1};  // [2, 3]
  const auto reduce = [&](const std::string& type) {
    GraphBuilder g({}, {});
    g.add(type, {0}, {{"axes", ints({1})}, {"keepdims", ints({0})}});
    GraphLayer layer = g.build();
    return run_forward(layer, {2, 3}, x);
  };
  EXPECT_EQ(reduce("ReduceSum"), (std::vector<float>{2, 3.5f}));
  EXPECT_EQ(reduce("ReduceMax"), (std::vector<float>{3, 4}));
  EXPECT_EQ(reduce("ReduceMin"), (std::vector<float>{-2, -1}));
  EXPECT_EQ(reduce("ReduceSumSquare"), (std::vector<float>{14, 17.25f}));
  const auto lse = reduce("ReduceLogSumExp");
  EXPECT_NEAR(lse[0], std::log(std::exp(1.0) + std::exp(-2.0) + std::exp(3.0)), 1e-5);
  const auto activation = [&](const std::string& type) {
    GraphBuilder g({}, {});
    g.add(type, {0});
    GraphLayer layer = g.build();
    return run_forward(layer, {2, 3}, x);
  };
  const auto mish = activation("Mish"), softplus = activation("Softplus"), selu = activation("Selu");
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double sp = std::log1p(std::exp(static_cast<double>(x[i])));
    EXPECT_NEAR(softplus[i], sp, 1e-6);
    EXPECT_NEAR(mish[i], x[i] * std::tanh(sp), 1e-5);
    EXPECT_NEAR(selu[i], x[i] > 0 ? 1.0507009873554805 * x[i] : 1.0507009873554805 * 1.6732632423543772 * std::expm1(x[i]), 1e-5);
  }
}

TEST(GraphOperatorsOutput, PadsAndBatchStatisticsFollowPyTorch) {
  const auto pad = [](const std::string& mode) {  // a row [1, 2, 3]: 2 before, 1 after (F.pad's modes)
    GraphBuilder g({}, {{{}, {0.5f}}});
    g.add("Pad", {0, -1, 1}, {{"mode", text(mode)}}, {{1, integers({0, 2, 0, 1})}});
    GraphLayer layer = g.build();
    return run_forward(layer, {1, 3}, {1, 2, 3});
  };
  EXPECT_EQ(pad("constant"), (std::vector<float>{0.5f, 0.5f, 1, 2, 3, 0.5f}));
  EXPECT_EQ(pad("reflect"), (std::vector<float>{3, 2, 1, 2, 3, 2}));
  EXPECT_EQ(pad("edge"), (std::vector<float>{1, 1, 1, 2, 3, 3}));

  // BatchNorm1d on [4, 1] (1, 2, 3, 6): mean 3, biased variance 3.5, unbiased 14/3; PyTorch's momentum 0.1
  // is ONNX's 0.9 of the running value.
  GraphBuilder g({}, {{{1}, {1.0f}}, {{1}, {0.0f}}, {{1}, {0.0f}, true}, {{1}, {1.0f}, true}});
  g.add("BatchNormalization", {0, 1, 2, 3, 4}, {{"momentum", real(0.9f)}});
  GraphLayer layer = g.build();
  Context ctx;
  layer.bind({}, ctx);
  layer.setup(ctx, plain_desc({4, 1}), Mode::train, false);
  Tensor x(plain_desc({4, 1}), ctx.engine());
  const float values[] = {1, 2, 3, 6};
  std::copy(values, values + 4, x.data());
  const Tensor& y = layer.forward(ctx, x);
  EXPECT_NEAR(y.data()[3], 3 / std::sqrt(3.5 + 1e-5), 1e-5);
  const auto state = layer.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_NEAR(state[0].floats[0], 0.1f * 3, 1e-6);
  EXPECT_NEAR(state[1].floats[0], 0.9f + 0.1f * 14 / 3, 1e-6);
}

// One operator of type `type` on the input [1, n] (x) and the constants, forward.
std::vector<float> forward_of(const std::string& type, std::vector<int> inputs, const std::vector<float>& x,
                              std::vector<GraphConstant> constants = {}, std::map<std::string, OpAttribute> attributes = {},
                              std::map<std::size_t, IntegerInput> integers = {}, dims_t dims = {}) {
  GraphBuilder g({}, std::move(constants));
  g.add(type, std::move(inputs), std::move(attributes), std::move(integers));
  GraphLayer layer = g.build();
  return run_forward(layer, dims.empty() ? dims_t{1, static_cast<std::int64_t>(x.size())} : dims, x);
}

TEST(GraphOperatorsOutput, ComparisonsAndLogicGiveOnesAndZerosWithBroadcasting) {
  const std::vector<float> x = {1, -2, 3, 0.5f, 4, -1};  // [2, 3] against a row [1, 0, 3]
  const auto compare = [&](const std::string& type) {
    return forward_of(type, {0, 1}, x, {{{3}, {1, 0, 3}}}, {}, {}, {2, 3});
  };
  EXPECT_EQ(compare("Equal"), (std::vector<float>{1, 0, 1, 0, 0, 0}));
  EXPECT_EQ(compare("Less"), (std::vector<float>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(compare("Greater"), (std::vector<float>{0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(compare("LessOrEqual"), (std::vector<float>{1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(compare("GreaterOrEqual"), (std::vector<float>{1, 0, 1, 0, 1, 0}));
  // The constant first, a column [0, 1] broadcast along the rows: 0 < [1, -2, 3], 1 < [0.5, 4, -1].
  EXPECT_EQ(forward_of("Less", {1, 0}, x, {{{2, 1}, {0, 1}}}, {}, {}, {2, 3}), (std::vector<float>{1, 0, 1, 0, 1, 0}));

  const std::vector<float> a = {0, 0, 1, 1}, b = {0, 1, 0, 1};  // the truth table, b a constant
  EXPECT_EQ(forward_of("And", {0, 1}, a, {{{4}, b}}), (std::vector<float>{0, 0, 0, 1}));
  EXPECT_EQ(forward_of("Or", {0, 1}, a, {{{4}, b}}), (std::vector<float>{0, 1, 1, 1}));
  EXPECT_EQ(forward_of("Xor", {0, 1}, a, {{{4}, b}}), (std::vector<float>{0, 1, 1, 0}));
  EXPECT_EQ(forward_of("Not", {0}, a), (std::vector<float>{1, 1, 0, 0}));

  // Where reads the comparison's 1s and 0s as its condition: x where x > 0, else 0.1 x.
  GraphBuilder g({}, {{{}, {0.0f}}, {{}, {0.1f}}});
  g.add("Where", {g.add("Greater", {0, 1}), 0, g.add("Mul", {0, 2})});
  GraphLayer leaky = g.build();
  const auto y = run_forward(leaky, {2, 3}, x);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], x[i] > 0 ? x[i] : 0.1f * x[i]) << i;
}

// x.bool() a mask of 1s where x is not 0, x.long() toward zero, x.float() as it is (their gradients: the
// ShapeAndIndexing table); a type ddl does not hold is named.
TEST(GraphOperatorsOutput, CastGivesMasksIntegersOrTheValuesAsTheyAre) {
  const std::vector<float> x = {-1.5f, -0.5f, 0, 0.5f, 2.7f, -0.0f};
  const auto cast = [&](std::int64_t to) { return forward_of("Cast", {0}, x, {}, {{"to", ints({to})}}); };
  EXPECT_EQ(cast(9), (std::vector<float>{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(cast(7), (std::vector<float>{-1, 0, 0, 0, 2, 0}));
  EXPECT_EQ(cast(6), cast(7));
  EXPECT_EQ(cast(1), x);
  OpSpec spec;
  spec.type = "Cast";
  spec.name = "net.onnx: Cast node 'c'";
  spec.attributes["to"] = ints({10});
  EXPECT_THROW(make_operator(spec), InputError);
}

TEST(GraphOperatorsOutput, ModAndStepsFollowPythonAndC) {
  const std::vector<float> a = {5.5f, -5.5f, 5.5f, -5.5f, 3, -3, 0.75f};
  const GraphConstant b = {{7}, {2, 2, -2, -2, 1.5f, 1.5f, -4}};
  // Python's 5.5 % 2, -5.5 % 2, 5.5 % -2, -5.5 % -2, 3 % 1.5, -3 % 1.5, 0.75 % -4 (torch.remainder's).
  EXPECT_EQ(forward_of("Mod", {0, 1}, a, {b}), (std::vector<float>{1.5f, 0.5f, -0.5f, -1.5f, 0, 0, -3.25f}));
  EXPECT_EQ(forward_of("Mod", {0, 1}, a, {b}, {{"fmod", ints({0})}}), forward_of("Mod", {0, 1}, a, {b}));
  // C's fmod (torch.fmod's): the dividend's sign.
  EXPECT_EQ(forward_of("Mod", {0, 1}, a, {b}, {{"fmod", ints({1})}}),
            (std::vector<float>{1.5f, -1.5f, 1.5f, -1.5f, 0, 0, 0.75f}));

  const std::vector<float> x = {-1.5f, -0.5f, 0, 0.5f, 1.5f, 2.5f, 2.3f, -2.7f};
  EXPECT_EQ(forward_of("Sign", {0}, x), (std::vector<float>{-1, -1, 0, 1, 1, 1, 1, -1}));
  EXPECT_EQ(forward_of("Floor", {0}, x), (std::vector<float>{-2, -1, 0, 0, 1, 2, 2, -3}));
  EXPECT_EQ(forward_of("Ceil", {0}, x), (std::vector<float>{-1, 0, 0, 1, 2, 3, 3, -2}));
  EXPECT_EQ(forward_of("Round", {0}, x), (std::vector<float>{-2, 0, 0, 0, 2, 2, 2, -3}));  // halves to even
}

// nn.PixelShuffle(2) (DepthToSpace, CRD) on channels [[0, 1], [2, 3]] + 4 * (2 i + j) for block (i, j); ONNX's
// DepthToSpace (DCR) undoes SpaceToDepth.
TEST(GraphOperatorsOutput, DepthToSpaceShufflesAsPyTorchAndUndoesSpaceToDepth) {
  std::vector<float> x(16);
  std::iota(x.begin(), x.end(), 0.0f);
  EXPECT_EQ(forward_of("DepthToSpace", {0}, x, {}, {{"blocksize", ints({2})}, {"mode", text("CRD")}}, {}, {1, 4, 2, 2}),
            (std::vector<float>{0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15}));
  std::vector<float> image(2 * 4 * 6);
  std::iota(image.begin(), image.end(), 1.0f);
  GraphBuilder g({}, {});
  g.add("DepthToSpace", {g.add("SpaceToDepth", {0}, {{"blocksize", ints({2})}})}, {{"blocksize", ints({2})}});
  GraphLayer round_trip = g.build();
  EXPECT_EQ(run_forward(round_trip, {1, 2, 4, 6}, image), image);
}

TEST(GraphOperatorsOutput, TriluAndCumSumFollowTorchs) {
  std::vector<float> x(12);  // [1, 3, 4]: 1 to 12
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  const auto trilu = [&](std::int64_t upper, std::optional<std::int64_t> k) {
    std::map<std::size_t, IntegerInput> given;
    if (k) given[1] = integers({*k}, true);
    return forward_of("Trilu", {0, -1}, x, {}, {{"upper", ints({upper})}}, given, {1, 3, 4});
  };
  EXPECT_EQ(trilu(1, std::nullopt), (std::vector<float>{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}));  // torch.triu(x)
  EXPECT_EQ(trilu(1, 1), (std::vector<float>{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}));
  EXPECT_EQ(trilu(0, -1), (std::vector<float>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}));  // torch.tril(x, -1)
  EXPECT_EQ(trilu(0, 2), (std::vector<float>{1, 2, 3, 0, 5, 6, 7, 8, 9, 10, 11, 12}));

  const std::vector<float> y = {1, 2, 3, 4, 5, 6};  // [2, 3]
  const auto cumsum = [&](std::int64_t axis, std::int64_t exclusive, std::int64_t reverse) {
    return forward_of("CumSum", {0, -1}, y, {}, {{"exclusive", ints({exclusive})}, {"reverse", ints({reverse})}},
                      {{1, integers({axis}, true)}}, {2, 3});
  };
  EXPECT_EQ(cumsum(1, 0, 0), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(cumsum(-1, 1, 0), (std::vector<float>{0, 1, 3, 0, 4, 9}));
  EXPECT_EQ(cumsum(1, 0, 1), (std::vector<float>{6, 5, 3, 15, 11, 6}));
  EXPECT_EQ(cumsum(1, 1, 1), (std::vector<float>{5, 3, 0, 11, 6, 0}));
  EXPECT_EQ(cumsum(0, 0, 0), (std::vector<float>{1, 2, 3, 5, 7, 9}));
}

// What the new operators cannot take is refused with one line that names the node.
TEST(GraphOperatorsOutput, TriluCumSumAndModRefuseWhatTheyCannotTake) {
  const auto refusal = [](const std::string& type, dims_t dims, std::map<std::string, OpAttribute> attributes,
                          std::map<std::size_t, IntegerInput> given, std::size_t inputs) -> std::string {
    OpSpec spec;
    spec.type = type;
    spec.name = "net.onnx: " + type + " node 'n'";
    spec.inputs.assign(inputs, -1);
    spec.inputs[0] = 0;
    spec.attributes = std::move(attributes);
    spec.integers = std::move(given);
    const OpValue x{std::move(dims)}, other{{}};
    std::vector<const OpValue*> in = {&x};
    if (inputs > 1) in.push_back(spec.integers.count(1) ? nullptr : &other);
    try {
      return "none: " + shapes::text(make_operator(spec)->output_dims(in, 1));
    } catch (const InputError& e) {
      return e.what();
    }
  };
  EXPECT_EQ(refusal("Trilu", {4}, {}, {}, 1), "net.onnx: Trilu node 'n': ddl takes the triangles of a tensor of rank 2 or more, not [4]");
  EXPECT_EQ(refusal("Trilu", {2, 3, 4}, {}, {}, 2), "net.onnx: Trilu node 'n': its k is not an integer known before the graph runs");
  EXPECT_EQ(refusal("CumSum", {2, 3}, {}, {}, 2), "net.onnx: CumSum node 'n': its axis is not one integer known before the graph runs");
  EXPECT_EQ(refusal("CumSum", {2, 3}, {}, {{1, integers({1})}}, 2), "none: [2x3]");
  EXPECT_EQ(refusal("Mod", {2, 3}, {{"fmod", ints({2})}}, {}, 2), "net.onnx: Mod node 'n': its fmod 2 is not 0 or 1");
}

TEST(GraphOperatorsOutput, ArgMaxAndArgMinGiveTheIndexFirstOrLast) {
  const std::vector<float> x = {1, 3, 3, 0, 2, 0};  // [2, 3]
  const auto arg = [&](const std::string& type, std::int64_t axis, std::int64_t last, std::int64_t keep) {
    GraphBuilder g({}, {});
    g.add(type, {0}, {{"axis", ints({axis})}, {"select_last_index", ints({last})}, {"keepdims", ints({keep})}});
    GraphLayer layer = g.build();
    return run_forward(layer, {2, 3}, x);
  };
  EXPECT_EQ(arg("ArgMax", 1, 0, 1), (std::vector<float>{1, 1}));
  EXPECT_EQ(arg("ArgMax", 1, 1, 0), (std::vector<float>{2, 1}));
  EXPECT_EQ(arg("ArgMin", -1, 1, 1), (std::vector<float>{0, 2}));
  EXPECT_EQ(arg("ArgMax", 0, 0, 0), (std::vector<float>{0, 0, 0}));
}

TEST(GraphOperatorsRegistry, EveryRecordIsFoundByItsTypeAndAnUnknownOneIsNamed) {
  for (const auto family : {elementwise_operators(), normalization_operators(), shape_operators(), reduction_operators(),
                            matrix_operators(), convolution_operators(), resampling_operators()})
    for (const OperatorRecord& record : family) EXPECT_EQ(find_operator(record.type), &record) << record.type;
  OpSpec spec;
  spec.type = "Cos";
  spec.name = "net.onnx: Cos node 'c'";
  try {
    make_operator(spec);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "net.onnx: Cos node 'c': ddl does not support this operator (docs/onnx.md lists those it does)");
  }
}

// docs/onnx.md's table of the pieces' operators is the registry's: every record has its row's entry.
TEST(GraphOperatorsRegistry, DocsListEveryOperator) {
  std::ifstream file(DDL_SOURCE_DIR "/docs/onnx.md");
  ASSERT_TRUE(file) << "docs/onnx.md";
  const std::string docs((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  for (const auto family : {elementwise_operators(), normalization_operators(), shape_operators(), reduction_operators(),
                            matrix_operators(), convolution_operators(), resampling_operators()})
    for (const OperatorRecord& record : family) {
      const std::string entry = "`" + std::string(record.type) + "`" +
                                (record.limits.empty() ? "" : " (" + std::string(record.limits) + ")");
      const std::string row = "| " + std::string(record.family) + " |";
      const auto at = docs.find(row);
      ASSERT_NE(at, std::string::npos) << row;
      EXPECT_NE(docs.substr(at, docs.find('\n', at) - at).find(entry), std::string::npos) << entry;
    }
}

}  // namespace
}  // namespace ddl::test
