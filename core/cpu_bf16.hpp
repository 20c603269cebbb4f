// Whether this CPU computes bf16 natively (AVX512-BF16, or AMX), as oneDNN finds it. bf16 training pays
// only there: elsewhere oneDNN emulates bf16 products with f32 instructions, slower than f32 itself.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace ddl {

inline bool cpu_computes_bf16() {
  // oneDNN's ISA values are cumulative bit sets: a later ISA holds every bit of the ones it extends.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

}  // namespace ddl
