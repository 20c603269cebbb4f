// Runs a command line through the shell and captures its exit code, stdout and stderr, for tests of the
// executables as users run them.
#pragma once

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace ddl::test {

struct ProcessResult {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

inline ProcessResult run_process(const std::string& command, const std::string& scratch_dir) {
  const std::string out_path = scratch_dir + "/stdout.txt", err_path = scratch_dir + "/stderr.txt";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system((command + " >" + out_path + " 2>" + err_path).c_str());
  ProcessResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

inline std::size_t count_lines(const std::string& text) {
  std::size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

}  // namespace ddl::test
