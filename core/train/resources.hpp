// Resident memory of this process, as the kernel counts it: the peak so far (getrusage) and now
// (/proc/self/statm; 0 where there is none).
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>

namespace ddl {

inline std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

inline std::size_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;
}

// Starts the peak over from what is resident now (Linux's clear_refs, 4.0 and later), so that a peak taken
// later leaves out memory used and freed before (the planner's probe of the whole model). False where the
// kernel does not allow it: the peak then keeps counting from the start.
inline bool restart_peak_resident() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

}  // namespace ddl
