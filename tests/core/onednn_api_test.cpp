// The oneDNN 3 cache-size interposer (core/onednn_cache_size.cpp) must be the function oneDNN itself calls:
// if a oneDNN release stopped exporting it, ddl would compute wrong gradients again on machines whose CPUID
// describes no caches, silently. This test makes that loud.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.hpp>

#if DNNL_VERSION_MAJOR >= 3 && defined(__x86_64__)
namespace dnnl::impl::cpu::platform {
unsigned get_per_core_cache_size(int level);
}

namespace ddl {
namespace {

TEST(OnednnCacheSize, TheInterposerIsWhatOnednnResolves) {
  void* resolved = dlsym(RTLD_DEFAULT, "_ZN4dnnl4impl3cpu8platform23get_per_core_cache_sizeEi");
  ASSERT_NE(resolved, nullptr) << "oneDNN no longer exports get_per_core_cache_size";
  EXPECT_EQ(resolved, reinterpret_cast<void*>(&dnnl::impl::cpu::platform::get_per_core_cache_size));
  EXPECT_NE(dlsym(RTLD_NEXT, "_ZN4dnnl4impl3cpu8platform23get_per_core_cache_sizeEi"), nullptr)
      << "oneDNN's own definition is not found behind the interposer";
}

TEST(OnednnCacheSize, EveryCoreHasAtLeastFourKibibytesOfL1AndL2) {
  EXPECT_GE(dnnl::impl::cpu::platform::get_per_core_cache_size(1), 4096u);
  EXPECT_GE(dnnl::impl::cpu::platform::get_per_core_cache_size(2), 4096u);
}

}  // namespace
}  // namespace ddl
#endif
