// oneDNN 3 on x86-64 derives each core's share of the L1, L2 and L3 caches from CPUID. On virtual
// machines whose CPUID describes no caches (leaves 4 and 0x8000001D empty; seen on the firecracker VMs
// ddl is developed on) oneDNN 3.7 computes 1 byte, and then its jit reorders into padded blocked weight
// layouts write wrong values (wrong convolution gradients, silently) and creating a sum primitive divides
// by zero. oneDNN 2 fell back to fixed sizes there; upstream fixed the same fault for AArch64
// (uxlfoundation/oneDNN#5313). Every program that links ddl_core compiles this file (an interface source
// of ddl_core), so its definition interposes oneDNN's own function of the same name (ELF interposition:
// libdnnl.so calls it through its PLT, and the executable's definition comes first; a static libdnnl.a
// would clash with it, Debian ships none). It keeps oneDNN's answer whenever that is a plausible size, or 0
// (a level this CPU lacks), and gives oneDNN's own fallback sizes for anything under 4 KiB.
// tests/core/onednn_api_test.cpp checks that it is the function oneDNN calls.
#include <oneapi/dnnl/dnnl_version.h>

#if DNNL_VERSION_MAJOR >= 3 && defined(__x86_64__)
#include <dlfcn.h>

namespace dnnl::impl::cpu::platform {

unsigned get_per_core_cache_size(int level) {
  using Query = unsigned (*)(int);
  static const Query onednn_query =
      reinterpret_cast<Query>(dlsym(RTLD_NEXT, "_ZN4dnnl4impl3cpu8platform23get_per_core_cache_sizeEi"));
  const unsigned measured = onednn_query ? onednn_query(level) : 0;
  if (measured == 0 || measured >= 4096) return measured;
  switch (level) {
    case 1:
      return 32u * 1024;
    case 2:
      return 512u * 1024;
    case 3:
      return 1024u * 1024;
    default:
      return 0;
  }
}

}  // namespace dnnl::impl::cpu::platform
#endif
