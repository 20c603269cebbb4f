#include "launch/stop_signals.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include "core/onednn_api.hpp"

namespace ddl {
namespace {

bool blocked_here(int signal) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, signal) == 1;
}

bool wait_for(const std::atomic<int>& received, int signal) {
  for (int i = 0; i < 3000 && received.load() != signal; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return received.load() == signal;
}

TEST(StopSignals, BlockBothSignalsInEveryLaterThreadAndAreRecordedOnceArmed) {
  StopSignals stop;
  EXPECT_TRUE(blocked_here(SIGINT));
  EXPECT_TRUE(blocked_here(SIGTERM));
  bool int_blocked = false, term_blocked = false;
  std::thread([&] {
    int_blocked = blocked_here(SIGINT);
    term_blocked = blocked_here(SIGTERM);
  }).join();
  EXPECT_TRUE(int_blocked);
  EXPECT_TRUE(term_blocked);
  stop.arm();
  EXPECT_EQ(stop.received().load(), 0);
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  EXPECT_TRUE(wait_for(stop.received(), SIGINT));
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  EXPECT_TRUE(wait_for(stop.received(), SIGTERM));
}

TEST(StopSignals, BeforeArmingASignalEndsTheProcessAsItWould) {
  EXPECT_EXIT(
      {
        StopSignals stop;
        kill(getpid(), SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(60));
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

TEST(StopSignals, BeforeArmingAnIgnoredSignalStaysIgnored) {
  EXPECT_EXIT(
      {
        std::signal(SIGINT, SIG_IGN);  // as bash starts a background job
        StopSignals stop;
        kill(getpid(), SIGINT);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::_Exit(7);
      },
      ::testing::ExitedWithCode(7), "");
}

// The case that corrupted ddl_train's heap: signals arriving while oneDNN's f32 gemm (a dense layer with
// plain weights) runs, whose JIT kernel holds a heap address in rsp. Every result must equal the first,
// and the process must live.
TEST(StopSignals, ASignalStormDuringDenseLayersLeavesResultsAndHeapIntact) {
  StopSignals stop;
  stop.arm();
  using dnnl::memory;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const memory::dim batch = 64, in = 4096, out = 64;
  const memory::desc src_md({batch, in}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc weights_md({out, in}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc dst_md({batch, out}, memory::data_type::f32, memory::format_tag::ab);
  const auto pd = make_inner_product_forward_pd(eng, dnnl::prop_kind::forward_inference, src_md, weights_md,
                                                memory::desc(), dst_md);
  SCOPED_TRACE(std::string("oneDNN implementation: ") + pd.impl_info_str());
  const dnnl::inner_product_forward ip(pd);
  memory src(src_md, eng), weights(weights_md, eng), dst(dst_md, eng);
  auto* s = static_cast<float*>(src.get_data_handle());
  auto* w = static_cast<float*>(weights.get_data_handle());
  for (memory::dim i = 0; i < batch * in; ++i) s[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
  for (memory::dim i = 0; i < out * in; ++i) w[i] = static_cast<float>(i % 89) / 890.0f - 0.05f;
  auto run = [&] {
    ip.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    strm.wait();
    const auto* d = static_cast<const float*>(dst.get_data_handle());
    return std::vector<float>(d, d + batch * out);
  };
  const std::vector<float> expected = run();

  std::atomic<bool> done{false};
  std::thread storm([&] {
    while (!done.load()) {
      kill(getpid(), SIGTERM);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  int differing_runs = 0;
  for (int i = 0; i < 1500; ++i) {
    std::vector<float> junk(1000 + i % 300, 1.0f);  // heap traffic beside the kernel, as a training step has
    if (run() != expected) ++differing_runs;
  }
  done.store(true);
  storm.join();
  EXPECT_EQ(differing_runs, 0);
  EXPECT_EQ(stop.received().load(), SIGTERM);
}

}  // namespace
}  // namespace ddl
