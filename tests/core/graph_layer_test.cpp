// The graph layer (core/graph/graph_layer.hpp): pieces shaped as a vision transformer exported from PyTorch
// computes them, their backward against finite differences, their forward against formulas written out
// here, and the errors that name the node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/layers/sequential.hpp"
#include "tests/core/gradient_check.hpp"
#include "tests/core/graph_builder.hpp"

namespace ddl::test {
namespace {

// x [2, 3, 4]: a layer norm written out (ReduceMean, Sub, Pow, Sqrt, Div, Mul by a weight), a product by a
// weight shared by every token, a bias added from the left, erf, a transpose, a batched product of two
// values, softmax, a reshape to [batch, -1], a strided slice, an expanded parameter concatenated, a gather,
// tanh, sigmoid, and a mean as a factor.
GraphLayer transformer_like_piece() {
  // values: 0 x; 1 gamma [4]; 2 w [4, 5]; 3 bias [5]; 4 token [1, 2]; 5 eps; 6 two; 7 three; then the operators
  GraphBuilder g({param("gamma", {4}), param("w", {4, 5}), param("bias", {5}), param("token", {1, 2})},
                 {{{}, {1e-5f}}, {{}, {2.0f}}, {{}, {3.0f}}});
  const int mean = g.add("ReduceMean", {0}, {{"axes", ints({-1})}});
  const int centred = g.add("Sub", {0, mean});
  const int squares = g.add("Pow", {centred, 6});
  const int variance = g.add("ReduceMean", {squares}, {{"axes", ints({-1})}});
  const int deviation = g.add("Sqrt", {g.add("Add", {variance, 5})});
  const int normal = g.add("Mul", {g.add("Div", {centred, deviation}), 1});
  const int product = g.add("MatMul", {normal, 2});  // [2, 3, 5]
  const int biased = g.add("Erf", {g.add("Add", {3, product})});
  const int turned = g.add("Transpose", {biased}, {{"perm", ints({0, 2, 1})}});  // [2, 5, 3]
  const int scores = g.add("MatMul", {turned, biased});                          // [2, 5, 5]
  const int soft = g.add("Softmax", {scores}, {{"axis", ints({-1})}});
  const int rows = g.add("Reshape", {soft, -1}, {}, {{1, integers({kBatchTimes, -1})}});  // [2, 25]
  const int sliced = g.add("Slice", {rows, -1, -1, -1, -1}, {},
                           {{1, integers({2})}, {2, integers({20})}, {3, integers({1})}, {4, integers({3})}});  // [2, 6]
  const int tokens = g.add("Expand", {4, -1}, {}, {{1, integers({kBatchTimes, 2})}});  // [2, 2]
  const int joined = g.add("Concat", {sliced, tokens}, {{"axis", ints({1})}});         // [2, 8]
  const int fourth = g.add("Gather", {turned, -1}, {{"axis", ints({1})}}, {{1, integers({3}, true)}});  // [2, 3]
  const int all = g.add("Concat", {joined, fourth}, {{"axis", ints({-1})}});  // [2, 11]
  const int some = g.add("Gather", {all, -1}, {{"axis", ints({1})}}, {{1, integers({0, 3, 7, -1})}});  // [2, 4]
  const int cubes = g.add("Pow", {some, 7});
  const int squashed = g.add("Sigmoid", {g.add("Tanh", {g.add("Identity", {cubes})})});
  const int factor = g.add("ReduceMean", {g.add("Tanh", {scores})}, {{"axes", ints({1, 2})}, {"keepdims", ints({0})}});  // [2]
  const int column = g.add("Reshape", {factor, -1}, {}, {{1, integers({0, 1})}});  // [2, 1]
  g.add("Mul", {squashed, column});  // [2, 4]
  return g.build();
}

TEST(GraphLayerGradient, TransformerLikePiece) {
  GraphLayer piece = transformer_like_piece();
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}, {.samples = 200}), 0u);
}

// The same on tensors of 18,000 and more elements (the slice's, the concatenations', the products'), which
// the OpenMP threads share by rows.
TEST(GraphLayerGradient, TransformerLikePieceOnTensorsTheThreadsShare) {
  GraphLayer piece = transformer_like_piece();
  EXPECT_EQ(check_gradients(piece, {3000, 3, 4}, {.samples = 200}), 0u);
}

TEST(GraphLayerGradient, BatchedProductOfAValueByAParameterWithBatchAxes) {
  // [2, 3, 4] x [2, 4, 3]: the parameter's gradient per batch; then a reversing transpose and a mean whose axis goes.
  GraphBuilder g({param("b", {2, 4, 3})}, {});
  const int reversed = g.add("Transpose", {g.add("MatMul", {0, 1})});  // [3, 3, 2]
  g.add("ReduceMean", {reversed}, {{"axes", ints({0})}, {"keepdims", ints({0})}});  // [3, 2]
  GraphLayer piece = g.build();
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}), 0u);
}

TEST(GraphLayerGradient, ProductsByAWeightReadTransposedInPlace) {
  // x [2, 3, 4] by w [5, 4] read as [4, 5] (nn.Linear's weight), then by [2, 5, 3]'s batches, then by
  // another weight read so, with a bias.
  GraphBuilder g({param("w", {5, 4}), param("v", {2, 5}), param("c", {2})}, {});
  const int first = g.add("MatMul", {0, 1}, {{"ddl_transpose_b", ints({1})}});  // [2, 3, 5]
  const int turned = g.add("Transpose", {first}, {{"perm", ints({0, 2, 1})}});     // [2, 5, 3]
  const int square = g.add("MatMul", {turned, first});                             // [2, 5, 5]
  g.add("MatMul", {square, 2, 3}, {{"ddl_transpose_b", ints({1})}});               // [2, 5, 2]
  GraphLayer piece = g.build();
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}), 0u);
}

TEST(GraphLayerGradient, LayerNormAndGeluOnOneDnnThenAProduct) {
  // x [2, 3, 4] normalized over its last axis, scaled and shifted, x added (its gradient comes from two
  // operators), GELU, then by w [4, 3].
  GraphBuilder g({param("gamma", {4}), param("beta", {4}), param("w", {4, 3})}, {});
  const int normal = g.add("LayerNormalization", {0, 1, 2}, {{"epsilon", real(1e-3f)}});
  g.add("MatMul", {g.add("Gelu", {g.add("Add", {normal, 0})}), 3});
  GraphLayer piece = g.build();
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}), 0u);
}

TEST(GraphLayerGradient, SqueezesAndUnsqueezes) {
  // x [2, 3, 1, 4] (an unbind's part): its axis 2 dropped, the rest seen as [2, 1, 3, 4, 1], multiplied by a
  // parameter broadcast along the inserted axes, all axes of size 1 dropped again, and by a weight.
  GraphBuilder g({param("scale", {3, 4, 1}), param("w", {4, 2})}, {});
  const int dropped = g.add("Squeeze", {0, -1}, {}, {{1, integers({2})}});                 // [2, 3, 4]
  const int inserted = g.add("Unsqueeze", {dropped, -1}, {}, {{1, integers({1, -1})}});    // [2, 1, 3, 4, 1]
  const int back = g.add("Squeeze", {g.add("Mul", {inserted, 1})});                        // [2, 3, 4]
  g.add("MatMul", {back, 2});
  GraphLayer piece = g.build();
  EXPECT_EQ(check_gradients(piece, {2, 3, 1, 4}), 0u);

  Context ctx;
  GraphBuilder wrong({}, {});
  wrong.add("Squeeze", {0, -1}, {}, {{1, integers({1})}});
  GraphLayer not_one = wrong.build();
  not_one.bind({}, ctx);
  EXPECT_THROW(not_one.setup(ctx, plain_desc({2, 3, 1, 4}), Mode::infer, false), InputError);
  // x.squeeze() keeps the batch, also where it is 1 (a model set up for one image).
  GraphBuilder all({}, {});
  all.add("Squeeze", {0});
  GraphLayer every = all.build();
  every.bind({}, ctx);
  EXPECT_EQ(dims_of(every.setup(ctx, plain_desc({1, 3, 1, 1}), Mode::infer, false)), (dims_t{1, 3}));
}

// x [2, 3, 4] -> (tanh(x) @ w + sigmoid(x)) * tanh(x), whole and cut in two layers after the product, where
// three values cross: the input itself, tanh(x) (read on both sides) and the product.
std::unique_ptr<Layer> gated_product(bool cut) {
  const dims_t image = {1, 3, 4};
  if (!cut) {
    GraphBuilder g({param("w", {4, 4})}, {});
    const int a = g.add("Tanh", {0});
    const int sum = g.add("Add", {g.add("MatMul", {a, 1}), g.add("Sigmoid", {0})});
    g.add("Mul", {sum, a});
    return g.make();
  }
  GraphBuilder first({param("w", {4, 4})}, {}, {.takes = {}, .hands_on = {0, 2, 3}});
  first.add("MatMul", {first.add("Tanh", {0}), 1});
  GraphBuilder second(
      {}, {}, {.takes = {{image, 0}, {image, 0}, {image, 0}}, .hands_on = {}});  // 0 x, 1 tanh(x), 2 the product
  second.add("Mul", {second.add("Add", {2, second.add("Sigmoid", {0})}), 1});
  auto chain = std::make_unique<Sequential>();
  chain->add(first.make()).add(second.make());
  return chain;
}

TEST(GraphLayerCut, TwoPartsComputeTheWholeGraph) {
  const dims_t in = {2, 3, 4};
  std::vector<std::vector<float>> outputs;
  for (const bool cut : {false, true}) {
    auto layer = gated_product(cut);
    Context ctx;
    BoundParams bound(*layer, random_values(16, 1, -0.5f, 0.5f), ctx);
    layer->setup(ctx, plain_desc(in), Mode::infer, false);
    const Tensor x = from_plain(ctx, random_values(product(in), 2), plain_desc(in));
    outputs.push_back(to_plain(ctx, layer->forward(ctx, x)));
  }
  ASSERT_EQ(outputs[0].size(), 24u);
  EXPECT_EQ(outputs[0], outputs[1]);
}

TEST(GraphLayerCut, GradientsFlowBackAcrossTheCut) {
  auto chain = gated_product(true);
  EXPECT_EQ(check_gradients(*chain, {2, 3, 4}), 0u);
}

TEST(GraphLayerCut, AnInputThatDoesNotHoldTheValuesTakenIsRefused) {
  auto chain = gated_product(true);
  Context ctx;
  BoundParams bound(*chain, std::vector<float>(16), ctx);
  auto& second = *dynamic_cast<Sequential&>(*chain).parts()[1];
  EXPECT_THROW(second.setup(ctx, plain_desc({2, 35}), Mode::infer, false), InputError);
}

// The bytes the buffer pool's arena holds for a step of a chain of `links` element-wise operators on x
// [64, 1024] (256 KB a value), once the pool has learned the step: about the most bytes alive at once.
std::size_t step_arena_bytes(const std::string& op, int links, Mode mode) {
  GraphBuilder g({}, {{{}, {0.5f}}});
  int v = 0;
  for (int i = 0; i < links; ++i) v = op == "Add" ? g.add("Add", {v, 1}) : g.add(op, {v});
  GraphLayer layer = g.build();
  Context ctx;
  layer.bind({}, ctx);
  const dims_t in = {64, 1024};
  layer.setup(ctx, plain_desc(in), mode, true);
  const Tensor x = from_plain(ctx, random_values(product(in), 3), plain_desc(in));
  for (int step = 0; step < 4; ++step) {
    ctx.begin_step(0);
    const Tensor& y = layer.forward(ctx, x);
    if (mode == Mode::train) {
      Tensor gy = from_plain(ctx, std::vector<float>(product(in), 1.0f), y.desc());
      layer.backward(ctx, gy);
      layer.release_gradient(ctx);
    }
  }
  return ctx.step_arena_bytes(0);
}

TEST(GraphLayerMemory, ValuesNoBackwardReadsAreGivenBackInForward) {
  constexpr std::size_t value = 64 * 1024 * sizeof(float);
  // In evaluation no backward reads anything: a value lives from its operator to the next one's (2 here).
  EXPECT_LE(step_arena_bytes("Tanh", 12, Mode::infer), 3 * value);
  // Sums' backward reads none of their values: in training too, and each gradient lives from the operator
  // that adds to it to the one that consumes it (4 here: the output and its gradient, two gradients).
  EXPECT_LE(step_arena_bytes("Add", 12, Mode::train), 5 * value);
  // Tanh's backward reads its input: the values stay for it (15 here, with the gradients).
  EXPECT_GE(step_arena_bytes("Tanh", 12, Mode::train), 12 * value);
}

TEST(GraphLayerOutput, FollowsTheFormulas) {
  // y = softmax(x / 2 - mean(x)) along the last axis, for x [1, 3]: checked against the formula.
  GraphBuilder g({}, {{{1}, {2.0f}}});
  const int half = g.add("Div", {0, 1});
  const int mean = g.add("ReduceMean", {0}, {{"axes", ints({1})}});
  g.add("Softmax", {g.add("Sub", {half, mean})}, {{"axis", ints({1})}});
  GraphLayer piece = g.build();
  Context ctx;
  piece.bind({}, ctx);
  piece.setup(ctx, plain_desc({1, 3}), Mode::infer, false);
  Tensor x(plain_desc({1, 3}), ctx.engine());
  const float in[3] = {1.0f, -2.0f, 4.0f};
  std::copy(in, in + 3, x.data());
  const Tensor& y = piece.forward(ctx, x);
  float z[3], sum = 0;
  for (int i = 0; i < 3; ++i) sum += (z[i] = std::exp(in[i] / 2 - 1.0f));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(y.data()[i], z[i] / sum, 1e-6f);
}

TEST(GraphLayerShapes, AnOperatorThatCannotTakeItsInputsIsNamed) {
  GraphBuilder g({param("w", {5, 2})}, {});
  g.add("MatMul", {0, 1});
  GraphLayer piece = g.build();
  Context ctx;
  AlignedBuffer<float> values(10), grads(10);
  piece.bind({{values.span(), grads.span()}}, ctx);
  try {
    piece.setup(ctx, plain_desc({2, 3, 4}), Mode::train, true);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("MatMul node: cannot multiply [2x3x4] by [5x2]"), std::string::npos) << e.what();
  }
  GraphBuilder unknown({}, {});
  unknown.add("Cos", {0});
  EXPECT_THROW(unknown.build(), InputError);
}

// ScatterND (swin_t's attention mask, assigned slices): rows of a parameter written into x [2, 3, 4], row
// [1, 2] twice (the last write wins and takes the gradient); then two elements of a second parameter, one at a
// negative index. Updates of other dims than the indices take are named.
TEST(GraphLayerGradient, ScatterNDWritesRowsAndElements) {
  GraphBuilder g({param("rows", {3, 4}), param("two", {2})}, {});
  const int written = g.add("ScatterND", {0, -1, 1}, {}, {{1, {{3, 2}, {1, 2, 0, 0, 1, 2}}}});
  g.add("ScatterND", {written, -1, 2}, {}, {{1, {{2, 3}, {0, 1, 1, 1, -3, 3}}}});
  GraphLayer piece = g.build();
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}), 0u);

  GraphBuilder wrong({param("rows", {3, 3})}, {});
  wrong.add("ScatterND", {0, -1, 1}, {}, {{1, {{3, 2}, {1, 2, 0, 0, 1, 2}}}});
  GraphLayer not_rows = wrong.build();
  Context ctx;
  BoundParams bound(not_rows, std::vector<float>(9, 0.0f), ctx);
  try {
    not_rows.setup(ctx, plain_desc({2, 3, 4}), Mode::infer, false);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "ScatterND node: its updates [3x3] are not the [3x4] its indices take");
  }
}

TEST(GraphLayerOutput, ScatterNDWritesTheLastUpdate) {
  // x [1, 4] (a row of four) with elements 3, 1 and 3 again set to 10, 20, 30.
  GraphBuilder g({}, {{{3}, {10, 20, 30}}});
  g.add("ScatterND", {0, -1, 1}, {}, {{1, {{3, 2}, {0, 3, 0, 1, 0, 3}}}});
  GraphLayer piece = g.build();
  Context ctx;
  piece.bind({}, ctx);
  piece.setup(ctx, plain_desc({1, 4}), Mode::infer, false);
  Tensor x(plain_desc({1, 4}), ctx.engine());
  std::fill(x.data(), x.data() + 4, 1.0f);
  const Tensor& y = piece.forward(ctx, x);
  EXPECT_EQ(std::vector<float>(y.data(), y.data() + 4), (std::vector<float>{1, 20, 1, 30}));
}

// MaxViT's attention as PyTorch 1.13 exports it: q k^T and (softmax) v as Einsums of [b, g, h, i, d] values.
TEST(GraphLayerGradient, EinsumsAsBatchedProducts) {
  GraphBuilder g({param("k", {2, 2, 2, 3, 4}), param("v", {2, 2, 2, 3, 5}), param("w", {2, 2, 2, 3, 4})}, {});
  const int scores = g.add("Einsum", {0, 1}, {{"equation", text("bghid,bghjd->bghij")}});  // [2, 2, 2, 3, 3]
  const int soft = g.add("Softmax", {scores}, {{"axis", ints({-1})}});
  const int mixed = g.add("Einsum", {soft, 2}, {{"equation", text("bghij,bghjd->bghid")}});  // [2, 2, 2, 3, 5]
  // Batch letters in other orders, the summed letter first, the result's axes transposed.
  const int turned = g.add("Einsum", {mixed, 0}, {{"equation", text("bghid , hgbie -> hbgde")}});  // [2, 2, 2, 5, 4]
  g.add("Einsum", {turned, 3}, {{"equation", text("hbgde,bghje->bghdj")}});  // [2, 2, 2, 5, 3]
  GraphLayer piece = g.build();
  EXPECT_EQ(check_gradients(piece, {2, 2, 2, 3, 4}), 0u);
  // Without "->": the letters seen once, in alphabetical order ("ik").
  GraphBuilder h({param("w", {4, 2})}, {});
  h.add("Einsum", {0, 1}, {{"equation", text("ij,jk")}});
  GraphLayer implicit = h.build();
  EXPECT_EQ(check_gradients(implicit, {3, 4}), 0u);
}

// Indices computed on the images are checked when the graph runs: one outside the axis, or no number, is
// named with the node.
TEST(GraphLayerShapes, AComputedIndexOutsideItsAxisIsNamed) {
  for (const float index : {5.0f, -6.0f, std::nanf(""), 1e30f}) {
    GraphBuilder g({}, {{{1}, {index}}});
    g.add("Gather", {0, 1}, {{"axis", ints({1})}});
    GraphLayer piece = g.build();
    Context ctx;
    piece.bind({}, ctx);
    piece.setup(ctx, plain_desc({2, 5}), Mode::infer, false);
    Tensor x(plain_desc({2, 5}), ctx.engine());
    std::fill(x.data(), x.data() + 10, 1.0f);
    try {
      piece.forward(ctx, x);
      FAIL() << index;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("Gather node: index "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(" is outside an axis of 5"), std::string::npos) << e.what();
    }
  }
}

// Three operands: as two products, the first pair the first in operand order that is one (here the second and
// third: the first two share no letter).
TEST(GraphLayerGradient, EinsumsOfThreeOperands) {
  GraphBuilder g({param("a", {2, 3, 4}), param("b", {2, 4, 5})}, {});
  g.add("Einsum", {0, 1, 2}, {{"equation", text("bij,bjk,bkl->bil")}});  // [2, 3, 5]
  GraphLayer batched = g.build();
  EXPECT_EQ(check_gradients(batched, {2, 3, 3}), 0u);
  GraphBuilder h({param("kl", {4, 5}), param("jk", {3, 4})}, {});
  h.add("Einsum", {0, 1, 2}, {{"equation", text("ij,kl,jk->il")}});  // [2, 5]
  GraphLayer reordered = h.build();
  EXPECT_EQ(check_gradients(reordered, {2, 3}), 0u);
  // A bilinear form between tokens: rows of two letters side by side ("nt"), then a batched product.
  GraphBuilder f({param("u", {4, 4})}, {});
  f.add("Einsum", {0, 1, 0}, {{"equation", text("nti,ij,nsj->nts")}});  // [2, 3, 3]
  GraphLayer bilinear = f.build();
  EXPECT_EQ(check_gradients(bilinear, {2, 3, 4}), 0u);
}

// Forward against the sum written out: (x a) b for x [2, 3], a [3, 4], b [4, 2].
TEST(GraphLayerForward, EinsumOfThreeOperandsIsTheWrittenOutSum) {
  Context ctx;
  GraphBuilder g({param("a", {3, 4}), param("b", {4, 2})}, {});
  g.add("Einsum", {0, 1, 2}, {{"equation", text("ij,jk,kl")}});
  GraphLayer piece = g.build();
  std::vector<float> a(12), b(8), x(6);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * float(i) - 0.5f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.3f - 0.07f * float(i);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + 0.25f * float(i);
  AlignedBuffer<float> av(12), bv(8), ag(12), bg(8);
  std::copy(a.begin(), a.end(), av.span().begin());
  std::copy(b.begin(), b.end(), bv.span().begin());
  piece.bind({{av.span(), ag.span()}, {bv.span(), bg.span()}}, ctx);
  piece.setup(ctx, plain_desc({2, 3}), Mode::infer, false);
  Tensor input(plain_desc({2, 3}), ctx.engine());
  std::copy(x.begin(), x.end(), input.data());
  const Tensor& y = piece.forward(ctx, input);
  for (int i = 0; i < 2; ++i)
    for (int l = 0; l < 2; ++l) {
      double sum = 0;
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) sum += double(x[i * 3 + j]) * a[j * 4 + k] * b[k * 2 + l];
      EXPECT_NEAR(y.data()[i * 2 + l], sum, 1e-5) << i << "," << l;
    }
}

TEST(GraphLayerShapes, EinsumsOtherThanOneBatchedProductAreNamed) {
  for (const char* equation : {"ij,jk,kl,lm->im", "ij,kl,mn->ijkl", "...ij,...jk->...ik", "ii,ij->j", "ij,kl->ikjl",
                               "ij,jk->i", "ij,jk->iz"}) {
    GraphBuilder g({param("w", {3, 3})}, {});
    g.add("Einsum", {0, 1}, {{"equation", text(equation)}});
    try {
      g.build();
      FAIL() << equation;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("Einsum node: ", 0), 0u) << e.what();
    }
  }
}

// A Dropout at ratio 1/4 on x [64, 100] of ones, as PyTorch's training export writes it (training_mode 1).
GraphLayer dropout_piece(bool training_mode) {
  GraphBuilder g({}, {{{}, {0.25f}}});
  std::map<std::size_t, IntegerInput> mode;
  if (training_mode) mode[2] = integers({1}, true);
  g.add("Dropout", {0, 1, -1}, {}, mode);
  return g.build();
}

std::vector<float> run_forward(GraphLayer& piece, Context& ctx, Tensor& x) {
  const Tensor& y = piece.forward(ctx, x);
  return {y.data(), y.data() + 6400};
}

TEST(GraphLayerRandom, DropoutKeepsThreeQuartersScaledAndItsMasksResume) {
  Context ctx;
  GraphLayer piece = dropout_piece(true);
  piece.bind({}, ctx);
  piece.setup(ctx, plain_desc({64, 100}), Mode::train, true);
  Tensor x(plain_desc({64, 100}), ctx.engine());
  std::fill(x.data(), x.data() + 6400, 1.0f);
  ASSERT_EQ(piece.state().size(), 1u);
  EXPECT_EQ(piece.state()[0].name, "op0.rng");
  const std::vector<std::uint64_t> start(piece.state()[0].words.begin(), piece.state()[0].words.end());

  const std::vector<float> first = run_forward(piece, ctx, x);
  const auto dropped = std::count(first.begin(), first.end(), 0.0f);
  EXPECT_EQ(std::count(first.begin(), first.end(), 4.0f / 3) + dropped, 6400);  // kept ones scaled by 1 / (1 - p)
  EXPECT_NEAR(dropped / 6400.0, 0.25, 0.03);
  // The gradient goes through the kept elements alone, scaled alike.
  Tensor dy(plain_desc({64, 100}), ctx.engine());
  std::fill(dy.data(), dy.data() + 6400, 1.0f);
  const Tensor& dx = piece.backward(ctx, dy);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), dx.data()));

  const std::vector<float> second = run_forward(piece, ctx, x);
  EXPECT_NE(first, second);  // a fresh mask each step
  // A run resumed from the state saved before the first step draws the same masks, as does a new layer.
  std::copy(start.begin(), start.end(), piece.state()[0].words.begin());
  EXPECT_EQ(run_forward(piece, ctx, x), first);
  GraphLayer again = dropout_piece(true);
  again.bind({}, ctx);
  again.setup(ctx, plain_desc({64, 100}), Mode::train, true);
  EXPECT_EQ(run_forward(again, ctx, x), first);
}

TEST(GraphLayerRandom, DropoutPassesItsInputInEvaluationAndWithoutTrainingMode) {
  Context ctx;
  Tensor x(plain_desc({64, 100}), ctx.engine());
  for (int i = 0; i < 6400; ++i) x.data()[i] = 0.01f * i;
  for (const auto& [training_mode, mode] : {std::pair{true, Mode::infer}, std::pair{false, Mode::train}}) {
    GraphLayer piece = dropout_piece(training_mode);
    piece.bind({}, ctx);
    piece.setup(ctx, plain_desc({64, 100}), mode, false);
    EXPECT_TRUE(std::equal(x.data(), x.data() + 6400, run_forward(piece, ctx, x).begin()));
  }
}

}  // namespace
}  // namespace ddl::test
