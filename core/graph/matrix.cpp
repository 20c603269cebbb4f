// The matrix products family: MatMul (numpy's: the last two axes, the others batch) and Gemm, on oneDNN's
// matmul, in bf16 where the context computes in bf16 (operands converted for the call, results f32).
// `ddl_transpose_b` (set by the importer for nn.Linear's x @ W^T) reads a [cols, inner] weight transposed in
// place; a third input [cols] is a bias added to every row.
#include <algorithm>
#include <cctype>

#include "core/graph/operator_registry.hpp"
#include "core/graph/tensor_walk.hpp"
#include "core/layers/matmul_product.hpp"

namespace ddl {
namespace {

using walk::dim;

// The same plain tensor seen with its last two axes swapped.
dnnl::memory::desc transposed(const dims_t& dims) {
  dims_t d = dims, s = shapes::strides_of(dims);
  const std::size_t r = dims.size();
  std::swap(d[r - 1], d[r - 2]);
  std::swap(s[r - 1], s[r - 2]);
  return walk::strided(d, s);
}

class MatMulOp : public Operator {
 public:
  explicit MatMulOp(OpSpec spec) : Operator(std::move(spec)) {
    transpose_b_ = spec_.integer(spec_.type == "Gemm" ? "transB" : "ddl_transpose_b", 0) != 0;
    if (spec_.type == "Gemm" &&
        (spec_.integer("transA", 0) != 0 || spec_.real("alpha", 1) != 1 || spec_.real("beta", 1) != 1))
      spec_.fail("ddl takes a Gemm with transA = 0 and alpha = beta = 1");
  }
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t &a0 = input(in, 0).dims, &b0 = input(in, 1).dims;
    const auto text = [](const dims_t& d) { return shapes::text(d); };
    dims_t a = a0, b = b0;
    if (transpose_b_) {
      if (b.size() != 2) spec_.fail("ddl reads a transposed second operand of rank 2 only, not " + text(b));
      std::swap(b[0], b[1]);
    }
    if (a.size() < 2 || b.size() < 2) spec_.fail("ddl multiplies matrices, not vectors: " + text(a0) + " by " + text(b0));
    const std::size_t r = std::max(a.size(), b.size());
    a.insert(a.begin(), r - a.size(), 1);
    b.insert(b.begin(), r - b.size(), 1);
    if (a[r - 1] != b[r - 2]) spec_.fail("cannot multiply " + text(a0) + " by " + text(b0));
    const dims_t a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
    if (b_batch != a_batch && product(b_batch) != 1)
      spec_.fail("ddl multiplies by one matrix or by one a batch, not " + text(a0) + " by " + text(b0));
    dims_t out = a_batch;
    out.push_back(a[r - 2]);
    out.push_back(b[r - 1]);
    if (in.size() > 2 && in[2]) {
      const dims_t& c = in[2]->dims;
      const bool row = product(c) == static_cast<std::size_t>(out.back()) && c.size() <= 2 && c.back() == out.back();
      if (!row && !(spec_.type == "Gemm" && shapes::broadcast(c, out) == out))
        spec_.fail("its bias " + text(c) + " does not fit a product of " + text(out));
    }
    return out;
  }

  void setup(Context& ctx, OpInputs in, const OpValue& out, bool train) override {
    dims_t a = in[0]->dims, b = in[1]->dims, c = out.dims;
    if (transpose_b_) std::swap(b[0], b[1]);
    const std::size_t r = out.dims.size();
    a.insert(a.begin(), r - a.size(), 1);
    b.insert(b.begin(), r - b.size(), 1);
    if (product(dims_t(b.begin(), b.end() - 2)) == 1) {
      // One matrix for every batch (a weight): a's batches are rows of one product, [rows, inner] by
      // [inner, cols], not many products of a few rows each (attention's [tokens, batch, features]).
      const dim rows = static_cast<dim>(product(a) / a[r - 1]);
      a = {rows, a[r - 1]};
      b = {b[r - 2], b[r - 1]};
      c = {rows, b[1]};
    }
    a_ = walk::plain(a);
    c_ = walk::plain(c);
    // b is kept as [cols, inner] where transposed: seen as [inner, cols] it is the transposed view.
    b_ = transpose_b_ ? transposed({b[1], b[0]}) : walk::plain(b);
    b_t_ = transpose_b_ ? walk::plain({b[1], b[0]}) : transposed(b);
    bias_rows_ = in.size() > 2 && in[2] && product(in[2]->dims) == static_cast<std::size_t>(c.back());
    bias_ = bias_rows_ ? walk::plain({1, c.back()}) : dnnl::memory::desc();
    forward_ = MatmulProduct(ctx, a_, b_, c_, 1.0f, bias_);
    if (!train) return;
    grad_a_ = MatmulProduct(ctx, c_, b_t_, a_, 1.0f, {}, true);
    if (transpose_b_) {  // b's gradient in its stored form: c's gradient transposed, by a
      c_t_ = transposed(c);
      grad_b_ = MatmulProduct(ctx, c_t_, a_, b_t_, 1.0f, {}, true);
    } else {
      a_t_ = transposed(a);
      grad_b_ = MatmulProduct(ctx, a_t_, c_, b_, 1.0f, {}, true);
    }
  }

  void forward(Context& ctx, OpInputs in, OpValue& out) override {
    const bool bias = in.size() > 2 && in[2];
    forward_(ctx, walk::over(a_, ctx, in[0]->data), walk::over(b_, ctx, in[1]->data), walk::over(c_, ctx, out.data),
             bias && bias_rows_ ? walk::over(bias_, ctx, in[2]->data) : dnnl::memory());
    if (bias && !bias_rows_) {  // a Gemm's C of another shape, broadcast
      const float* add = in[2]->data;
      walk::each(out.dims, shapes::broadcast_strides(in[2]->dims, out.dims), dims_t(out.dims.size(), 0),
                 [&](std::size_t o, dim i, dim) { out.data[o] += add[i]; });
    }
  }

  void backward(Context& ctx, OpInputs in, const OpValue& out, float*) override {
    const OpValue &a = *in[0], &b = *in[1];
    const float* gy = out.grad;
    if (a.grad) grad_a_(ctx, walk::over(c_, ctx, gy), walk::over(b_t_, ctx, b.data), walk::over(a_, ctx, a.grad));
    if (in.size() > 2 && in[2] && in[2]->grad) {  // the sum of the gradients it was added to
      float* g = in[2]->grad;
      walk::each(out.dims, shapes::broadcast_strides(in[2]->dims, out.dims), dims_t(out.dims.size(), 0),
                 [&](std::size_t o, dim i, dim) { g[i] += gy[o]; });
    }
    if (b.grad && transpose_b_)
      grad_b_(ctx, walk::over(c_t_, ctx, gy), walk::over(a_, ctx, a.data), walk::over(b_t_, ctx, b.grad));
    else if (b.grad)
      grad_b_(ctx, walk::over(a_t_, ctx, a.data), walk::over(c_, ctx, gy), walk::over(b_, ctx, b.grad));
  }

 private:
  bool transpose_b_ = false, bias_rows_ = false;
  dnnl::memory::desc a_, b_, c_, a_t_, b_t_, c_t_, bias_;  // the operands, seen transposed; the bias as [1, cols]
  MatmulProduct forward_, grad_a_, grad_b_;
};

// Einsum of two operands that is one batched matrix product (MaxViT's attention, "bghid,bghjd->bghij" and
// "bghij,bghjd->bghid"): each letter once in a term; every letter of an operand in the other one or in the
// result; at most one letter of the first operand alone (the rows), one of the second alone (the columns) and
// one summed over; the letters of all three are batch axes. The operands and the result are read in place under
// strides, on oneDNN's matmul, as [batch..., rows, sum] by [batch..., sum, cols].
class EinsumOp : public Operator {
 public:
  explicit EinsumOp(OpSpec spec) : Operator(std::move(spec)) {
    std::string equation;
    for (const char c : spec_.text("equation", "")) if (c != ' ') equation += c;
    const auto comma = equation.find(','), arrow = equation.find("->");
    if (comma == std::string::npos || equation.find(',', comma + 1) != std::string::npos || equation.find('.') != std::string::npos)
      spec_.fail("ddl takes an Einsum of two operands without ellipsis, not '" + equation + "'");
    a_ = equation.substr(0, comma);
    b_ = equation.substr(comma + 1, arrow == std::string::npos ? std::string::npos : arrow - comma - 1);
    if (arrow != std::string::npos) c_ = equation.substr(arrow + 2);
    for (char l = 'A'; arrow == std::string::npos && l <= 'z'; ++l)  // implicit: the letters seen once, in order
      if (std::count(a_.begin(), a_.end(), l) + std::count(b_.begin(), b_.end(), l) == 1) c_ += l;
    for (const std::string* term : {&a_, &b_, &c_})
      for (const char l : *term)
        if (std::count(term->begin(), term->end(), l) != 1 || !std::isalpha(static_cast<unsigned char>(l)))
          spec_.fail("ddl takes each letter once in a term, not '" + equation + "'");
    for (const char l : a_ + b_ + c_)
      if (std::string& g = group(l, equation); g.find(l) == std::string::npos) g += l;
    if (rows_.size() > 1 || cols_.size() > 1 || sum_.size() > 1)
      spec_.fail("'" + equation + "' is not one batched matrix product");
    rows_.resize(1, '\0'), cols_.resize(1, '\0'), sum_.resize(1, '\0');
    std::string batch;
    for (const char l : c_)
      if (batch_.find(l) != std::string::npos) batch += l;
    batch_ = batch;  // in the result's order
  }
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t &a = input(in, 0).dims, &b = input(in, 1).dims;
    if (a.size() != a_.size() || b.size() != b_.size())
      spec_.fail("its operands " + shapes::text(a) + " and " + shapes::text(b) + " do not fit '" + a_ + "," + b_ + "'");
    dims_t out;
    for (const char l : c_) out.push_back(size_of(l, a, b));
    for (const char l : sum_.substr(0, sum_.find('\0'))) size_of(l, a, b);
    return out;
  }
  void setup(Context& ctx, OpInputs in, const OpValue& out, bool train) override {
    const dims_t &a = in[0]->dims, &b = in[1]->dims;
    const char r = rows_[0], k = sum_[0], c = cols_[0];
    a_md_ = seen(a_, a, {r, k});
    b_md_ = seen(b_, b, {k, c});
    c_md_ = seen(c_, out.dims, {r, c});
    forward_ = MatmulProduct(ctx, a_md_, b_md_, c_md_, 1.0f);
    if (!train) return;
    b_t_ = seen(b_, b, {c, k});
    a_t_ = seen(a_, a, {k, r});
    grad_a_ = MatmulProduct(ctx, c_md_, b_t_, a_md_, 1.0f, {}, true);
    grad_b_ = MatmulProduct(ctx, a_t_, c_md_, b_md_, 1.0f, {}, true);
  }
  void forward(Context& ctx, OpInputs in, OpValue& out) override {
    forward_(ctx, walk::over(a_md_, ctx, in[0]->data), walk::over(b_md_, ctx, in[1]->data), walk::over(c_md_, ctx, out.data));
  }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float*) override {
    const dnnl::memory gy = walk::over(c_md_, ctx, out.grad);
    if (in[0]->grad) grad_a_(ctx, gy, walk::over(b_t_, ctx, in[1]->data), walk::over(a_md_, ctx, in[0]->grad));
    if (in[1]->grad) grad_b_(ctx, walk::over(a_t_, ctx, in[0]->data), gy, walk::over(b_md_, ctx, in[1]->grad));
  }

 private:
  // The letter's group: in all three the batch, in both operands the sum, else the rows or the columns.
  std::string& group(char l, const std::string& equation) {
    const bool in_a = a_.find(l) != std::string::npos, in_b = b_.find(l) != std::string::npos;
    const bool in_c = c_.find(l) != std::string::npos;
    if (in_a && in_b) return in_c ? batch_ : sum_;
    if (in_c && (in_a || in_b)) return in_a ? rows_ : cols_;
    spec_.fail("'" + equation + "' sums over a letter of one operand, or gives one of neither");
  }
  dim size_of(char l, const dims_t& a, const dims_t& b) const {
    const auto ia = a_.find(l), ib = b_.find(l);
    if (ia != std::string::npos && ib != std::string::npos && a[ia] != b[ib])
      spec_.fail("its operands " + shapes::text(a) + " and " + shapes::text(b) + " differ along '" + std::string(1, l) + "'");
    return ia != std::string::npos ? a[ia] : b[ib];
  }
  // A term's tensor seen as [batch..., x, y] under its own strides; a letter '\0' is an axis of 1.
  dnnl::memory::desc seen(const std::string& term, const dims_t& dims, std::initializer_list<char> last) const {
    const dims_t own = shapes::strides_of(dims);
    dims_t d, s;
    std::string order = batch_;
    order.append(last.begin(), last.end());
    for (const char l : order) {
      const auto at = l == '\0' ? std::string::npos : term.find(l);
      d.push_back(at == std::string::npos ? 1 : dims[at]);
      s.push_back(at == std::string::npos ? 1 : own[at]);
    }
    return walk::strided(d, s);
  }
  // Letters: the operands', the result's, and each group's (the rows, columns and sum one letter or '\0').
  std::string a_, b_, c_, batch_, rows_, cols_, sum_;
  dnnl::memory::desc a_md_, b_md_, c_md_, a_t_, b_t_;
  MatmulProduct forward_, grad_a_, grad_b_;
};

const OperatorRecord kMatrixRecords[] = {
    {"MatMul", "matrix products", make<MatMulOp>,
     "operands of rank 2 or more; the second one matrix (a weight) or with the first's batch axes"},
    {"Gemm", "matrix products", make<MatMulOp>, "transA 0, alpha = beta = 1"},
    {"Einsum", "matrix products", make<EinsumOp>,
     "two operands, one batched matrix product: each letter once a term, at most one of rows, of columns and summed over"},
};

}  // namespace

std::span<const OperatorRecord> matrix_operators() { return kMatrixRecords; }

}  // namespace ddl
