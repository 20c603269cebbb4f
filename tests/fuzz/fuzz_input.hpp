// What every fuzz target shares: a scratch folder for the files a parser reads (ddl's parsers take paths,
// and HDF5 reads its files itself), and the rule each input is held to: the parser succeeds or throws
// ddl::InputError, the one error that ends in one line naming the problem. Anything else (another
// exception, a crash, a sanitizer report, a hang or an allocation above libFuzzer's limits) is a finding.
#pragma once

#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>

#include "core/error.hpp"

namespace ddl::fuzz {

// One folder per process, removed at exit: under $DDL_FUZZ_SCRATCH (run_fuzzers.sh's, which it removes
// also after a finding, when no destructor runs), else on tmpfs when there is one (HDF5 reopens the file
// for every input).
class Scratch {
 public:
  Scratch() {
    const char* given = std::getenv("DDL_FUZZ_SCRATCH");
    const std::string base = given ? given : std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    path_ = base + "/ddl_fuzz_XXXXXX";
    if (!mkdtemp(path_.data())) std::abort();
  }
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline const std::string& scratch() {
  static const Scratch folder;
  return folder.path();
}

inline void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::abort();
}

// Runs `parse`; an InputError is the expected outcome for a bad input, anything else stops the fuzzer with
// the exception's type and text (libFuzzer then saves the input as crash-<hash>).
template <typename Parse>
void expect_success_or_input_error(Parse parse) {
  try {
    parse();
  } catch (const InputError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: not an InputError but %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
}

// HDF5 callocs about 1 MB (its metadata cache) for every file it opens; under ASan each such block is a
// fresh mapping whose page faults took most of an input's time. Unlimited free lists keep it for reuse.
// Called first thing, with h5::no_cleanup_at_exit, by the targets that open HDF5 files.
inline void set_up_hdf5() { H5set_free_list_limits(-1, -1, -1, -1, -1, -1); }

// Every HDF5 file, dataset, group, attribute and type a parser opened must be closed again when it is done
// with an input, whether it succeeded or not: a handle left open is a leak LeakSanitizer cannot see (the
// memory is HDF5's).
inline void expect_no_open_hdf5_objects() {
  const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open != 0) {
    std::fprintf(stderr, "fuzz: %zd HDF5 objects left open\n", open);
    std::abort();
  }
}

}  // namespace ddl::fuzz
