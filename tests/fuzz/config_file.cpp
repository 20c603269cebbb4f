// Fuzz target: a ddl_train config file (--config FILE, "key = value" lines with the long option names),
// parsed with the options every run needs given on the command line, then described as a checkpoint
// stores it. The input is the file.
#include <cstdint>
#include <string>
#include <vector>

#include "launch/train_options.hpp"
#include "models/registry.hpp"
#include "tests/fuzz/fuzz_input.hpp"

// The options parser asks the registry for the model names only to print them in --help; the registry
// would bring every model and layer into the fuzz build.
std::vector<std::string> ddl::model_names() { return {"seed_cnn", "vgg16"}; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ddl::fuzz::scratch() + "/run.cfg";
  ddl::fuzz::write_file(path, data, size);
  std::vector<std::string> args = {"ddl_train", "--train", "train.h5", "--config", path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ddl::fuzz::expect_success_or_input_error([&] {
    const auto options = ddl::parse_train_options(static_cast<int>(argv.size()), argv.data());
    if (options) (void)options->describe();
  });
  return 0;
}
