// The matrix products family: MatMul (numpy's: the last two axes, the others batch) and Gemm, on oneDNN's
// matmul, in bf16 where the context computes in bf16 (operands converted for the call, results f32).
// `ddl_transpose_b` (set by the importer for nn.Linear's x @ W^T) reads a [cols, inner] weight transposed in
// place; a third input [cols] is a bias added to every row.
#include <algorithm>
#include <array>
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
  bool backward_reads_input(std::size_t i, const std::vector<bool>& wanted) const override {
    return i < 2 && wanted.at(1 - i);
  }
  bool backward_reads_output(const std::vector<bool>&) const override { return false; }

 private:
  bool transpose_b_ = false, bias_rows_ = false;
  dnnl::memory::desc a_, b_, c_, a_t_, b_t_, c_t_, bias_;  // the operands, seen transposed; the bias as [1, cols]
  MatmulProduct forward_, grad_a_, grad_b_;
};

// An Einsum's equation, spaces dropped: the operands' terms and the result's (for an implicit result the
// letters seen once, in alphabetical order).
struct EinsumTerms {
  std::vector<std::string> operands;
  std::string result;
};

EinsumTerms einsum_terms(const OpSpec& spec) {
  std::string equation;
  for (const char c : spec.text("equation", ""))
    if (c != ' ') equation += c;
  if (equation.find('.') != std::string::npos)
    spec.fail("ddl takes an Einsum without ellipsis, not '" + equation + "'");
  const auto arrow = equation.find("->");
  EinsumTerms t;
  std::string left = equation.substr(0, arrow);
  for (std::size_t from = 0;;) {
    const auto comma = left.find(',', from);
    t.operands.push_back(left.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  if (arrow != std::string::npos) t.result = equation.substr(arrow + 2);
  for (char l = 'A'; arrow == std::string::npos && l <= 'z'; ++l)
    if (std::count(left.begin(), left.end(), l) == 1) t.result += l;
  std::vector<const std::string*> all = {&t.result};
  for (const auto& term : t.operands) all.push_back(&term);
  for (const std::string* term : all)
    for (const char l : *term)
      if (std::count(term->begin(), term->end(), l) != 1 || !std::isalpha(static_cast<unsigned char>(l)))
        spec.fail("ddl takes each letter once in a term, not '" + equation + "'");
  return t;
}

// The letters of a two-operand product by role: in all three terms the batch, in both operands the sum, else
// the rows (the first operand's) or the columns (the second's). Empty `problem` where it is one batched matrix
// product: no letter of one term alone, and the rows, the columns and the sum each letters side by side in the
// same order in both terms that hold them, so that each is one axis of the plain tensors.
struct ProductLetters {
  std::string batch, rows, cols, sum, problem;
};

ProductLetters product_letters(const std::string& a, const std::string& b, const std::string& c) {
  ProductLetters p;
  const auto has = [](const std::string& term, char l) { return term.find(l) != std::string::npos; };
  for (const char l : a + b + c) {
    std::string* group = nullptr;
    if (has(a, l) && has(b, l))
      group = has(c, l) ? &p.batch : &p.sum;
    else if (has(c, l) && (has(a, l) || has(b, l)))
      group = has(a, l) ? &p.rows : &p.cols;
    if (!group)
      p.problem = "it sums over a letter of one operand, or gives one of neither";
    else if (!has(*group, l))
      *group += l;
  }
  const auto together = [&](const std::string& group, const std::string& term) {
    return group.empty() || term.find(group) != std::string::npos;
  };
  if (p.problem.empty() && !(together(p.rows, a) && together(p.rows, c) && together(p.cols, b) && together(p.cols, c) &&
                             together(p.sum, a) && together(p.sum, b)))
    p.problem = "its rows, columns or summed letters are not side by side in the same order in each term";
  std::string batch;  // in the result's order
  for (const char l : c)
    if (has(p.batch, l)) batch += l;
  p.batch = batch;
  return p;
}

// Einsum of two operands that is one batched matrix product (MaxViT's attention, "bghid,bghjd->bghij" and
// "bghij,bghjd->bghid"; a token-wise product "nti,ij->ntj"): product_letters' rules; the letters of all three
// terms are batch axes. The operands and the result are read in place under
// strides, on oneDNN's matmul, as [batch..., rows, sum] by [batch..., sum, cols].
class EinsumOp : public Operator {
 public:
  EinsumOp(OpSpec spec, std::string a, std::string b, std::string c)
      : Operator(std::move(spec)), a_(std::move(a)), b_(std::move(b)), c_(std::move(c)) {
    ProductLetters p = product_letters(a_, b_, c_);
    if (!p.problem.empty()) spec_.fail("'" + a_ + "," + b_ + "->" + c_ + "': " + p.problem);
    batch_ = p.batch;
    rows_ = p.rows, cols_ = p.cols, sum_ = p.sum;
  }
  dims_t output_dims(OpInputs in, std::int64_t) const override {
    const dims_t &a = input(in, 0).dims, &b = input(in, 1).dims;
    if (a.size() != a_.size() || b.size() != b_.size())
      spec_.fail("its operands " + shapes::text(a) + " and " + shapes::text(b) + " do not fit '" + a_ + "," + b_ + "'");
    dims_t out;
    for (const char l : c_) out.push_back(size_of(l, a, b));
    for (const char l : sum_) size_of(l, a, b);
    return out;
  }
  void setup(Context& ctx, OpInputs in, const OpValue& out, bool train) override {
    const dims_t &a = in[0]->dims, &b = in[1]->dims;
    const std::string &r = rows_, &k = sum_, &c = cols_;
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
  dim size_of(char l, const dims_t& a, const dims_t& b) const {
    const auto ia = a_.find(l), ib = b_.find(l);
    if (ia != std::string::npos && ib != std::string::npos && a[ia] != b[ib])
      spec_.fail("its operands " + shapes::text(a) + " and " + shapes::text(b) + " differ along '" + std::string(1, l) + "'");
    return ia != std::string::npos ? a[ia] : b[ib];
  }
  // A term's tensor seen as [batch..., x, y] under its own strides, x and y each a group of letters side by
  // side (one axis of their sizes' product); a group the term lacks, or an empty one, is an axis of 1.
  dnnl::memory::desc seen(const std::string& term, const dims_t& dims, std::initializer_list<std::string> last) const {
    const dims_t own = shapes::strides_of(dims);
    dims_t d, s;
    for (const char l : batch_) {
      d.push_back(dims[term.find(l)]);
      s.push_back(own[term.find(l)]);
    }
    for (const std::string& group : last) {
      const auto at = group.empty() ? std::string::npos : term.find(group);
      dim size = 1;
      for (std::size_t i = 0; at != std::string::npos && i < group.size(); ++i) size *= dims[at + i];
      d.push_back(size);
      s.push_back(at == std::string::npos ? 0 : own[at + group.size() - 1]);
    }
    // An axis of 1 the term lacks takes the stride it would have were the view dense (oneDNN's matmul, given a
    // stride of 1 there beside another of 1, refuses to run: "nk,nkd->nd").
    const std::size_t x = d.size() - 2, y = d.size() - 1;
    if (s[y] == 0) s[y] = 1;
    if (s[x] == 0) s[x] = d[y] * s[y];
    return walk::strided(d, s);
  }
  // Letters: the operands', the result's, and each group's.
  std::string a_, b_, c_, batch_, rows_, cols_, sum_;
  dnnl::memory::desc a_md_, b_md_, c_md_, a_t_, b_t_;
  MatmulProduct forward_, grad_a_, grad_b_;
};

// Einsum of three operands: two of them first (the first pair in operand order whose product and then the
// product with the third are each one batched matrix product), then the third, through an intermediate kept
// from forward to backward.
class ChainedEinsumOp : public Operator {
 public:
  ChainedEinsumOp(OpSpec spec, const EinsumTerms& t) : Operator(std::move(spec)) {
    for (const auto& [x, y, z] : {std::array{0, 1, 2}, std::array{1, 2, 0}, std::array{0, 2, 1}}) {
      const std::string &a = t.operands[x], &b = t.operands[y], &c = t.operands[z];
      std::string between;  // the pair's letters still read: by the third operand or the result
      for (const char l : a + b)
        if ((c + t.result).find(l) != std::string::npos && between.find(l) == std::string::npos) between += l;
      if (!product_letters(a, b, between).problem.empty() || !product_letters(between, c, t.result).problem.empty())
        continue;
      order_ = {std::size_t(x), std::size_t(y), std::size_t(z)};
      first_ = std::make_unique<EinsumOp>(spec_, a, b, between);
      second_ = std::make_unique<EinsumOp>(spec_, between, c, t.result);
      return;
    }
    spec_.fail("ddl takes an Einsum of three operands as two batched matrix products, which this one is not");
  }
  dims_t output_dims(OpInputs in, std::int64_t batch) const override {
    OpValue pair{first_->output_dims(pair_inputs(in), batch)};
    const std::array<const OpValue*, 2> then = {&pair, &input(in, order_[2])};
    return second_->output_dims(then, batch);
  }
  void setup(Context& ctx, OpInputs in, const OpValue& out, bool train) override {
    between_.dims = first_->output_dims(pair_inputs(in), 0);
    data_.assign(static_cast<std::size_t>(shapes::count(between_.dims)), 0.0f);
    between_.data = data_.data();
    first_->setup(ctx, pair_inputs(in), between_, train);
    second_->setup(ctx, then_inputs(in), out, train);
  }
  void forward(Context& ctx, OpInputs in, OpValue& out) override {
    first_->forward(ctx, pair_inputs(in), between_);
    second_->forward(ctx, then_inputs(in), out);
  }
  void backward(Context& ctx, OpInputs in, const OpValue& out, float* scratch) override {
    grad_.assign(data_.size(), 0.0f);
    between_.grad = grad_.data();
    second_->backward(ctx, then_inputs(in), out, scratch);
    first_->backward(ctx, pair_inputs(in), between_, scratch);
    between_.grad = nullptr;
  }

 private:
  std::array<const OpValue*, 2> pair_inputs(OpInputs in) const {
    return {&input(in, order_[0]), &input(in, order_[1])};
  }
  std::array<const OpValue*, 2> then_inputs(OpInputs in) const { return {&between_, &input(in, order_[2])}; }
  std::array<std::size_t, 3> order_{};
  std::unique_ptr<EinsumOp> first_, second_;
  OpValue between_;
  std::vector<float> data_, grad_;
};

std::unique_ptr<Operator> make_einsum(OpSpec spec) {
  const EinsumTerms t = einsum_terms(spec);
  if (t.operands.size() == 2)
    return std::make_unique<EinsumOp>(std::move(spec), t.operands[0], t.operands[1], t.result);
  if (t.operands.size() == 3) return std::make_unique<ChainedEinsumOp>(std::move(spec), t);
  spec.fail("ddl takes an Einsum of two or three operands, not " + std::to_string(t.operands.size()));
}

const OperatorRecord kMatrixRecords[] = {
    {"MatMul", "matrix products", make<MatMulOp>,
     "operands of rank 2 or more; the second one matrix (a weight) or with the first's batch axes"},
    {"Gemm", "matrix products", make<MatMulOp>, "transA 0, alpha = beta = 1"},
    {"Einsum", "matrix products", make_einsum,
     "two operands as one batched matrix product: each letter once a term, the letters of the rows, of the "
     "columns and of the sum each side by side; three as two such products"},
};

}  // namespace

std::span<const OperatorRecord> matrix_operators() { return kMatrixRecords; }

}  // namespace ddl
