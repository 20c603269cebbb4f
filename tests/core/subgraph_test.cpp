// The subgraph layer (core/layers/subgraph.hpp): every operation's backward against finite differences, in
// pieces shaped as a vision transformer exported from PyTorch computes them, and its forward against the
// formulas written out here.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "core/layers/subgraph.hpp"
#include "tests/core/gradient_check.hpp"

namespace ddl::test {
namespace {

using Kind = SubgraphOp::Kind;

SubgraphOp op(Kind kind, std::vector<int> inputs, std::vector<std::int64_t> ints = {}) {
  SubgraphOp o;
  o.kind = kind;
  o.inputs = std::move(inputs);
  o.ints = std::move(ints);
  o.name = "op";
  return o;
}

ParamSpec param(const std::string& name, dims_t dims) { return {name, std::move(dims), Init::zeros}; }

// x [2, 3, 4]: a layer norm written out (ReduceMean, Sub, Pow, Sqrt, Div, Mul by a weight), a product by a
// weight shared by every token, a bias added from the left, erf, a transpose, a batched product of two
// values, softmax, a reshape to [batch, -1], a strided slice, an expanded parameter concatenated, a gather,
// tanh, sigmoid, and a mean as a factor.
Subgraph transformer_like_piece() {
  // values: 0 x; 1 gamma [4]; 2 w [4, 5]; 3 bias [5]; 4 token [1, 2]; 5 eps; then the operations from 6
  std::vector<SubgraphOp> ops;
  ops.push_back(op(Kind::reduce_mean, {0}, {-1}));  // 6
  ops.push_back(op(Kind::sub, {0, 6}));              // 7
  ops.push_back(op(Kind::pow, {7}));                 // 8
  ops.back().exponent = 2;
  ops.push_back(op(Kind::reduce_mean, {8}, {-1}));  // 9
  ops.push_back(op(Kind::add, {9, 5}));              // 10
  ops.push_back(op(Kind::sqrt, {10}));               // 11
  ops.push_back(op(Kind::div, {7, 11}));             // 12
  ops.push_back(op(Kind::mul, {12, 1}));             // 13
  ops.push_back(op(Kind::matmul, {13, 2}));          // 14: [2, 3, 5]
  ops.push_back(op(Kind::add, {3, 14}));             // 15
  ops.push_back(op(Kind::erf, {15}));                // 16
  ops.push_back(op(Kind::transpose, {16}, {0, 2, 1}));  // 17: [2, 5, 3]
  ops.push_back(op(Kind::matmul, {17, 16}));         // 18: [2, 5, 5]
  ops.push_back(op(Kind::softmax, {18}));            // 19
  ops.back().axis = -1;
  ops.push_back(op(Kind::reshape, {19}, {kBatchTimes, -1}));  // 20: [2, 25]
  ops.push_back(op(Kind::slice, {20}, {1}));         // 21: [2, 6]
  ops.back().starts = {2};
  ops.back().ends = {20};
  ops.back().steps = {3};
  ops.push_back(op(Kind::expand, {4}, {kBatchTimes, 2}));  // 22: [2, 2]
  ops.push_back(op(Kind::concat, {21, 22}));         // 23: [2, 8]
  ops.back().axis = 1;
  ops.push_back(op(Kind::gather, {17}));             // 24: [2, 3], token 3 of each
  ops.back().axis = 1;
  ops.back().indices = {3};
  ops.back().scalar_index = true;
  ops.push_back(op(Kind::concat, {23, 24}));         // 25: [2, 11]
  ops.back().axis = -1;
  ops.push_back(op(Kind::gather, {25}));             // 26: [2, 4]
  ops.back().axis = 1;
  ops.back().indices = {0, 3, 7, -1};
  ops.push_back(op(Kind::pow, {26}));                // 27
  ops.back().exponent = 3;
  ops.push_back(op(Kind::identity, {27}));           // 28
  ops.push_back(op(Kind::tanh, {28}));               // 29
  ops.push_back(op(Kind::sigmoid, {29}));            // 30
  ops.push_back(op(Kind::tanh, {18}));               // 31: [2, 5, 5]
  ops.push_back(op(Kind::reduce_mean, {31}, {1, 2}));  // 32: [2, 1, 1]
  ops.back().keep_dims = false;                     // [2]
  ops.push_back(op(Kind::reshape, {32}, {0, 1}));    // 33: [2, 1]
  ops.push_back(op(Kind::mul, {30, 33}));            // 34: [2, 4]
  return Subgraph({param("gamma", {4}), param("w", {4, 5}), param("bias", {5}), param("token", {1, 2})},
                  {{{}, {1e-5f}}}, std::move(ops));
}

TEST(SubgraphGradient, TransformerLikePiece) {
  Subgraph piece = transformer_like_piece();
  GradientCheckOptions options;
  options.samples = 200;
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}, options), 0u);
}

// The same on tensors of 18,000 and more elements (the slice's, the concatenations', the products'), which
// the OpenMP threads share by rows.
TEST(SubgraphGradient, TransformerLikePieceOnTensorsTheThreadsShare) {
  Subgraph piece = transformer_like_piece();
  EXPECT_EQ(check_gradients(piece, {3000, 3, 4}, {.samples = 200}), 0u);
}

TEST(SubgraphGradient, BatchedProductOfAValueByAParameterWithBatchAxes) {
  // [2, 3, 4] x [2, 4, 3]: the parameter's gradient per batch; then a reversing transpose and a mean whose axis goes.
  std::vector<SubgraphOp> ops;
  ops.push_back(op(Kind::matmul, {0, 1}));         // 2
  ops.push_back(op(Kind::transpose, {2}, {}));     // 3: [3, 3, 2]
  ops.push_back(op(Kind::reduce_mean, {3}, {0}));  // 4: [3, 2]
  ops.back().keep_dims = false;
  Subgraph piece({param("b", {2, 4, 3})}, {}, std::move(ops));
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}), 0u);
}

TEST(SubgraphGradient, ReluOfTheInputTimesAWeight) {
  // A step of 1e-3: the checker's inputs stay further than that from ReLU's kink at 0 (as ReluGradient's).
  std::vector<SubgraphOp> ops;
  ops.push_back(op(Kind::relu, {0}));     // 2
  ops.push_back(op(Kind::matmul, {2, 1}));  // 3: [2, 3, 2]
  Subgraph piece({param("w", {4, 2})}, {}, std::move(ops));
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}, {.step = 1e-3f}), 0u);
}

TEST(SubgraphGradient, ProductsByAWeightReadTransposedInPlace) {
  // x [2, 3, 4] by w [5, 4] read as [4, 5] (nn.Linear's weight), then by [2, 5, 3]'s batches, then by
  // another weight read so, with a bias.
  std::vector<SubgraphOp> ops;
  ops.push_back(op(Kind::matmul, {0, 1}));          // 4: [2, 3, 5]
  ops.back().transpose_b = true;
  ops.push_back(op(Kind::transpose, {4}, {0, 2, 1}));  // 5: [2, 5, 3]
  ops.push_back(op(Kind::matmul, {5, 4}));          // 6: [2, 5, 5]
  ops.push_back(op(Kind::matmul, {6, 2, 3}));       // 7: [2, 5, 2], v [2, 5] read as [5, 2], plus c [2]
  ops.back().transpose_b = true;
  Subgraph piece({param("w", {5, 4}), param("v", {2, 5}), param("c", {2})}, {}, std::move(ops));
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}), 0u);
}

TEST(SubgraphGradient, LayerNormAndGeluOnOneDnnThenAProduct) {
  // x [2, 3, 4] normalized over its last axis, scaled and shifted, x added (its gradient comes from two
  // operations), GELU, then by w [4, 3].
  std::vector<SubgraphOp> ops;
  ops.push_back(op(Kind::layer_norm, {0, 1, 2}));  // 4
  ops.back().epsilon = 1e-3f;
  ops.push_back(op(Kind::add, {4, 0}));            // 5
  ops.push_back(op(Kind::gelu, {5}));              // 6
  ops.push_back(op(Kind::matmul, {6, 3}));         // 7: [2, 3, 3]
  Subgraph piece({param("gamma", {4}), param("beta", {4}), param("w", {4, 3})}, {}, std::move(ops));
  EXPECT_EQ(check_gradients(piece, {2, 3, 4}), 0u);
}

TEST(SubgraphGradient, SqueezesAndUnsqueezes) {
  // x [2, 3, 1, 4] (an unbind's part): its axis 2 dropped, the rest seen as [2, 1, 3, 4, 1], multiplied by a
  // parameter broadcast along the inserted axes, all axes of size 1 dropped again, and by a weight.
  std::vector<SubgraphOp> ops;
  ops.push_back(op(Kind::squeeze, {0}, {2}));         // 3: [2, 3, 4]
  ops.push_back(op(Kind::unsqueeze, {3}, {1, -1}));   // 4: [2, 1, 3, 4, 1]
  ops.push_back(op(Kind::mul, {4, 1}));               // 5
  ops.push_back(op(Kind::squeeze, {5}));              // 6: [2, 3, 4]
  ops.push_back(op(Kind::matmul, {6, 2}));            // 7: [2, 3, 2]
  Subgraph piece({param("scale", {3, 4, 1}), param("w", {4, 2})}, {}, std::move(ops));
  EXPECT_EQ(check_gradients(piece, {2, 3, 1, 4}), 0u);

  std::vector<SubgraphOp> wrong;
  wrong.push_back(op(Kind::squeeze, {0}, {1}));
  Subgraph not_one({}, {}, std::move(wrong));
  Context ctx;
  not_one.bind({}, ctx);
  EXPECT_THROW(not_one.setup(ctx, plain_desc({2, 3, 1, 4}), Mode::infer, false), InputError);
  // x.squeeze() keeps the batch, also where it is 1 (a model set up for one image).
  std::vector<SubgraphOp> all;
  all.push_back(op(Kind::squeeze, {0}));
  Subgraph every({}, {}, std::move(all));
  every.bind({}, ctx);
  EXPECT_EQ(dims_of(every.setup(ctx, plain_desc({1, 3, 1, 1}), Mode::infer, false)), (dims_t{1, 3}));
}

TEST(SubgraphOutput, FollowsTheFormulas) {
  // y = softmax(x / 2 - mean(x)) along the last axis, for x [1, 3]: checked against the formula.
  std::vector<SubgraphOp> ops;
  ops.push_back(op(Kind::div, {0, 1}));            // 2
  ops.push_back(op(Kind::reduce_mean, {0}, {1}));  // 3
  ops.push_back(op(Kind::sub, {2, 3}));            // 4
  ops.push_back(op(Kind::softmax, {4}));           // 5
  ops.back().axis = 1;
  Subgraph piece({}, {{{1}, {2.0f}}}, std::move(ops));
  Context ctx;
  piece.bind({}, ctx);
  piece.setup(ctx, plain_desc({1, 3}), Mode::infer, false);
  Tensor x(plain_desc({1, 3}), ctx.engine());
  const float in[3] = {1.0f, -2.0f, 4.0f};
  std::copy(in, in + 3, x.data());
  const Tensor& y = piece.forward(ctx, x);
  const float mean = 1.0f;
  float z[3], sum = 0;
  for (int i = 0; i < 3; ++i) sum += (z[i] = std::exp(in[i] / 2 - mean));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(y.data()[i], z[i] / sum, 1e-6f);
}

TEST(SubgraphShapes, AnOperationThatCannotTakeItsInputsIsNamed) {
  std::vector<SubgraphOp> ops;
  ops.push_back(op(Kind::matmul, {0, 1}));
  ops.back().name = "MatMul node 'm'";
  Subgraph piece({param("w", {5, 2})}, {}, std::move(ops));
  Context ctx;
  AlignedBuffer<float> values(10), grads(10);
  piece.bind({{values.span(), grads.span()}}, ctx);
  try {
    piece.setup(ctx, plain_desc({2, 3, 4}), Mode::train, true);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("MatMul node 'm': cannot multiply [2x3x4] by [5x2]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddl::test
