// Peak resident memory of this process, as the kernel counts it (getrusage).
#pragma once

#include <sys/resource.h>

#include <cstddef>

namespace ddl {

inline std::size_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;
}

}  // namespace ddl
