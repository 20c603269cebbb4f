// SplitDense (a dense layer split by output features across a tensor group) against the whole Dense it
// replaces, and a model's split parameters against the unsplit model's. core/ has no MPI, so the group here
// is T threads in one process, each with its own Context and layer, meeting at a shared barrier.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "core/aligned_buffer.hpp"
#include "core/layers/dense.hpp"
#include "core/layers/split_dense.hpp"
#include "models/registry.hpp"
#include "tests/core/gradient_check.hpp"
#include "tests/core/tensor_util.hpp"

namespace ddl {
namespace {

using test::from_plain;
using test::random_values;
using test::to_plain;

// What the ranks of one group share: a slot per rank and a generation-counted barrier. A rank that fails
// breaks the barrier, so the others throw instead of waiting forever.
class Exchange {
 public:
  explicit Exchange(int size) : size_(size), floats_(size), ints_(size) {}
  int size() const { return size_; }
  void barrier() {
    std::unique_lock lock(mutex_);
    if (broken_) throw std::runtime_error("another rank failed");
    const std::uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation || broken_; });
    if (generation_ == generation) throw std::runtime_error("another rank failed");
  }
  void fail() {
    std::lock_guard lock(mutex_);
    broken_ = true;
    cv_.notify_all();
  }
  // Each rank writes only its own slot before the first barrier of a call, and all read after it; the
  // barrier's mutex orders the two, and the second barrier keeps the next call's writes after the reads.
  std::vector<std::vector<float>>& slots(float*) { return floats_; }
  std::vector<std::vector<std::int32_t>>& slots(std::int32_t*) { return ints_; }

 private:
  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool broken_ = false;
  std::vector<std::vector<float>> floats_;
  std::vector<std::vector<std::int32_t>> ints_;
};

class ThreadGroup : public TensorGroup {
 public:
  ThreadGroup(Exchange& ex, int rank) : ex_(ex), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return ex_.size(); }
  void all_gather(std::span<const float> mine, std::span<float> all) override { gather(mine, all); }
  void all_gather(std::span<const std::int32_t> mine, std::span<std::int32_t> all) override { gather(mine, all); }
  void reduce_scatter_sum(std::span<const float> all, std::span<float> mine) override {
    if (all.size() != mine.size() * static_cast<std::size_t>(size())) throw std::logic_error("reduce-scatter: sizes");
    auto& slots = publish(all);
    for (std::size_t k = 0; k < mine.size(); ++k) {
      float sum = 0;
      for (const auto& slot : slots) sum += slot[static_cast<std::size_t>(rank_) * mine.size() + k];
      mine[k] = sum;
    }
    ex_.barrier();
  }
  void all_reduce_sum(std::span<float> values) override {
    auto& slots = publish(std::span<const float>(values));
    for (std::size_t k = 0; k < values.size(); ++k) {
      float sum = 0;
      for (const auto& slot : slots) sum += slot[k];
      values[k] = sum;
    }
    ex_.barrier();
  }
  double take_bytes_sent() override { return 0; }

 private:
  template <typename T>
  std::vector<std::vector<T>>& publish(std::span<const T> mine) {
    auto& slots = ex_.slots(static_cast<T*>(nullptr));
    slots[static_cast<std::size_t>(rank_)].assign(mine.begin(), mine.end());
    ex_.barrier();
    return slots;
  }
  template <typename T>
  void gather(std::span<const T> mine, std::span<T> all) {
    if (all.size() != mine.size() * static_cast<std::size_t>(size())) throw std::logic_error("all-gather: sizes");
    auto& slots = publish(mine);
    for (int r = 0; r < size(); ++r) std::copy(slots[r].begin(), slots[r].end(), all.begin() + r * mine.size());
    ex_.barrier();
  }
  Exchange& ex_;
  int rank_;
};

// Runs fn(group) on `ranks` threads; rethrows the first rank's exception after all have ended.
void run_ranks(int ranks, const std::function<void(TensorGroup&)>& fn) {
  Exchange ex(ranks);
  std::vector<std::exception_ptr> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      ThreadGroup group(ex, r);
      try {
        fn(group);
      } catch (...) {
        errors[r] = std::current_exception();
        ex.fail();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Values agree within tol * max(1, |expected|): the split layer's products run through oneDNN kernels of
// other shapes (O/T outputs, T*N rows) and its input gradient sums T partial products in another order than
// the whole layer's one GEMM, so float results differ in the last bits, never by more than ~1e-6 here.
constexpr float kTol = 1e-5f;
void expect_close(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (!(std::abs(actual[i] - expected[i]) <= kTol * std::max(1.0f, std::abs(expected[i]))) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << actual[i] << ", expected " << expected[i];
}

// This rank's rows of each whole parameter (weight, then bias), as its ParamSpec places them.
std::vector<float> rows_of(const std::vector<float>& whole, const std::vector<ParamSpec>& specs) {
  std::vector<float> mine;
  std::size_t whole_offset = 0;
  for (const auto& spec : specs) {
    EXPECT_EQ(spec.row_groups, 1);
    const std::size_t row = product(spec.dims) / static_cast<std::size_t>(spec.dims[0]);
    const auto from = whole.begin() + static_cast<std::ptrdiff_t>(whole_offset + static_cast<std::size_t>(spec.row_begin) * row);
    mine.insert(mine.end(), from, from + static_cast<std::ptrdiff_t>(product(spec.dims)));
    whole_offset += product(spec.whole_dims);
  }
  return mine;
}

struct Pass {
  std::vector<float> y, dx, grads;  // output, input gradient, parameter gradients (empty in inference)
  dims_t y_dims;
  std::vector<ParamSpec> specs;
};

// One forward (and in training one backward with output gradient g) of `layer` bound to `params`.
Pass run(Layer& layer, Context& ctx, const std::vector<float>& params, const std::vector<float>& x, const dims_t& x_dims,
         Mode mode, const std::vector<float>& g) {
  test::BoundParams bound(layer, params, ctx);
  layer.setup(ctx, plain_desc(x_dims), mode, mode == Mode::train);
  const Tensor input = from_plain(ctx, x, plain_desc(x_dims));
  const Tensor& y = layer.forward(ctx, input);
  Pass pass{to_plain(ctx, y), {}, {}, y.dims(), layer.param_specs()};
  if (mode == Mode::train) {
    const Tensor diff = from_plain(ctx, g, y.desc());
    pass.dx = to_plain(ctx, layer.backward(ctx, diff));
    pass.grads = bound.gradients();
    layer.release_gradient(ctx);
  }
  return pass;
}

Pass run_whole(const DenseOptions& opt, const std::vector<float>& params, const std::vector<float>& x,
               const dims_t& x_dims, Mode mode, const std::vector<float>& g) {
  Context ctx;
  Dense dense(opt);
  return run(dense, ctx, params, x, x_dims, mode, g);
}

// Each rank of a T-group runs SplitDense on input x_of(rank) with its rows of the whole parameters.
std::vector<Pass> run_split(const DenseOptions& opt, int T, bool gathers, const std::vector<float>& whole_params,
                            const std::function<std::vector<float>(int)>& x_of, const dims_t& x_dims, Mode mode,
                            const std::vector<float>& g) {
  std::vector<Pass> passes(T);
  run_ranks(T, [&](TensorGroup& group) {
    Context ctx;
    SplitDense layer(opt, group, gathers);
    passes[group.rank()] = run(layer, ctx, rows_of(whole_params, layer.param_specs()), x_of(group.rank()), x_dims,
                               mode, g);
  });
  return passes;
}

constexpr int kIn = 12, kOut = 8;
constexpr dnnl::memory::dim kRows = 3;

std::vector<float> whole_params(std::uint64_t seed) { return random_values(kOut * kIn + kOut, seed, -0.5f, 0.5f); }

TEST(SplitDenseFakeGroup, CollectivesFollowTheHeader) {
  // The fake itself, so that the tests below check SplitDense and not it: rank r contributes r + k.
  run_ranks(3, [](TensorGroup& g) {
    const float r = static_cast<float>(g.rank());
    std::vector<std::int32_t> ints(6);
    g.all_gather(std::vector<std::int32_t>{g.rank(), 10 + g.rank()}, ints);
    EXPECT_EQ(ints, (std::vector<std::int32_t>{0, 10, 1, 11, 2, 12}));
    std::vector<float> mine(2);
    g.reduce_scatter_sum(std::vector<float>{r, r + 1, r + 2, r + 3, r + 4, r + 5}, mine);  // sums 3, 6, ..., 18
    EXPECT_EQ(mine, (std::vector<float>{3.0f + 6 * g.rank(), 6.0f + 6 * g.rank()}));
    std::vector<float> values{r, 1};
    g.all_reduce_sum(values);
    EXPECT_EQ(values, (std::vector<float>{3, 3}));
  });
}

TEST(SplitDense, MatchesTheWholeLayerOnASharedBatch) {
  for (const int T : {2, 4})
    for (const bool relu : {false, true}) {
      SCOPED_TRACE("T " + std::to_string(T) + (relu ? " +relu" : ""));
      const DenseOptions opt{.in_features = kIn, .out_features = kOut, .relu = relu};
      const auto params = whole_params(1);
      const auto x = random_values(kRows * kIn, 2), g = random_values(kRows * kOut, 3);
      const Pass whole = run_whole(opt, params, x, {kRows, kIn}, Mode::train, g);
      const auto passes = run_split(opt, T, false, params, [&](int) { return x; }, {kRows, kIn}, Mode::train, g);
      for (int r = 0; r < T; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const Pass& p = passes[r];
        EXPECT_EQ(p.specs[0].row_begin, kOut / T * r);
        EXPECT_EQ(p.y_dims, (dims_t{kRows, kOut}));
        expect_close(p.y, whole.y, "output");  // every rank holds the whole output
        expect_close(p.grads, rows_of(whole.grads, p.specs), "parameter gradients");
        expect_close(p.dx, whole.dx, "input gradient");  // summed over the group: the whole one
      }
    }
}

TEST(SplitDense, GathersTheGroupsBatchInTraining) {
  for (const int T : {2, 4})
    for (const bool relu : {false, true}) {
      SCOPED_TRACE("T " + std::to_string(T) + (relu ? " +relu" : ""));
      const DenseOptions opt{.in_features = kIn, .out_features = kOut, .relu = relu};
      const auto params = whole_params(4);
      // Rank r's own rows are rows [r N, (r + 1) N) of the group's batch: rank-major, as all_gather puts them.
      const auto x = random_values(T * kRows * kIn, 5), g = random_values(T * kRows * kOut, 6);
      const Pass whole = run_whole(opt, params, x, {T * kRows, kIn}, Mode::train, g);
      const auto own = [&](const std::vector<float>& v, int r, std::size_t width) {
        const auto from = v.begin() + static_cast<std::ptrdiff_t>(r * kRows * width);
        return std::vector<float>(from, from + static_cast<std::ptrdiff_t>(kRows * width));
      };
      const auto passes = run_split(opt, T, true, params, [&](int r) { return own(x, r, kIn); }, {kRows, kIn},
                                    Mode::train, g);
      for (int r = 0; r < T; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const Pass& p = passes[r];
        EXPECT_EQ(p.y_dims, (dims_t{T * kRows, kOut}));
        expect_close(p.y, whole.y, "output");
        expect_close(p.grads, rows_of(whole.grads, p.specs), "parameter gradients");
        // The loss below is a mean over the group's T N images; each rank's images count T times as much in
        // the mean over its own N (the header's x T).
        std::vector<float> expected = own(whole.dx, r, kIn);
        for (float& v : expected) v *= static_cast<float>(T);
        expect_close(p.dx, expected, "input gradient");
      }
    }
}

TEST(SplitDense, DoesNotGatherInInference) {
  // In evaluation every rank brings the same images: the layer is the whole one on them, batch unchanged.
  const int T = 2;
  const DenseOptions opt{.in_features = kIn, .out_features = kOut, .relu = true};
  const auto params = whole_params(7);
  const auto x = random_values(kRows * kIn, 8);
  const Pass whole = run_whole(opt, params, x, {kRows, kIn}, Mode::infer, {});
  const auto passes = run_split(opt, T, true, params, [&](int) { return x; }, {kRows, kIn}, Mode::infer, {});
  for (const Pass& p : passes) {
    EXPECT_EQ(p.y_dims, (dims_t{kRows, kOut}));
    expect_close(p.y, whole.y, "output");
  }
}

TEST(SplitDenseModel, EachRankHoldsItsSliceOfTheWholeModelsInitialValues) {
  // seed_cnn: layer 5 is dense 4096->64 +relu, layer 6 dense 64->10. T = 4 splits only layer 5 (10 is not a
  // multiple of 4), so a whole layer follows a split one in the whole buffer.
  constexpr std::uint64_t seed = 11;
  Context ctx;
  auto unsplit = make_model("seed_cnn", {}, ctx);
  unsplit->initialize(seed);
  const std::span<const float> whole = std::as_const(*unsplit).params();
  for (const auto& [T, layers] : {std::pair{2, std::vector<std::size_t>{5, 6}}, std::pair{4, std::vector<std::size_t>{5}}}) {
    SCOPED_TRACE("T " + std::to_string(T));
    // How many ranks hold each whole value: T for a layer every rank holds, 1 for a split one.
    std::vector<int> expected_holders(whole.size());
    for (const auto& e : unsplit->param_entries()) {
      const bool split = std::find(layers.begin(), layers.end(), e.layer) != layers.end();
      std::fill_n(expected_holders.begin() + static_cast<std::ptrdiff_t>(e.offset), e.size, split ? 1 : T);
    }
    std::vector<int> holders(whole.size());
    std::mutex holders_mutex;
    run_ranks(T, [&](TensorGroup& group) {
      Context rank_ctx;
      auto model = define_model("seed_cnn", {});
      model->split_layers(layers, group);
      model->finalize(rank_ctx);
      model->initialize(seed);
      EXPECT_EQ(model->whole_param_count(), whole.size());
      const auto mine = std::as_const(*model).params();
      std::size_t covered = 0, mismatches = 0;
      std::lock_guard lock(holders_mutex);
      for (const WholeSegment& s : model->whole_segments())
        for (std::size_t b = 0; b < s.blocks; ++b)
          for (std::size_t k = 0; k < s.count; ++k) {
            const std::size_t here = s.offset + b * s.count + k, there = s.whole_offset + b * s.stride + k;
            ASSERT_LT(here, mine.size());
            ASSERT_LT(there, whole.size());
            ++holders[there];
            ++covered;
            // Same seed, same bits: the rank's values are the whole model's, exactly.
            if (mine[here] != whole[there] && mismatches++ < 5)
              ADD_FAILURE() << "rank " << group.rank() << ": value " << here << " is " << mine[here]
                            << ", whole value " << there << " is " << whole[there];
          }
      EXPECT_EQ(covered, mine.size()) << "the segments cover this rank's buffer";
    });
    EXPECT_EQ(holders, expected_holders) << "split values lie on exactly one rank, the others on every rank";
  }
}

}  // namespace
}  // namespace ddl
