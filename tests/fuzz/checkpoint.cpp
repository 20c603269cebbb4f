// Fuzz target: a checkpoint loaded with load_checkpoint as --resume loads one: into a small model with
// every kind of state (convolution and dense parameters, BatchNorm's running statistics, a dropout
// generator; checkpoint_model.hpp) with Adam's state, with SGD's, without an optimizer, and into the second
// stage of a pipeline (a slice of the parameters). The input chooses a valid checkpoint of that model
// (written with Adam or with SGD) and edits it (hdf5_edits.hpp).
#include <cstdint>
#include <filesystem>
#include <memory>

#include "core/data/hdf5.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/checkpoint.hpp"
#include "tests/fuzz/checkpoint_model.hpp"
#include "tests/fuzz/fuzz_input.hpp"
#include "tests/fuzz/hdf5_edits.hpp"

namespace {

const ddl::fuzz::Hdf5Names kNames = {
    {"ddl_format", "format_version", "model", "epochs_done", "steps_done", "seed", "best_accuracy", "configuration",
     "param_names", "class_names", "input_mean", "input_std"},
    {"params", "model_state", "model_state/1.running_mean", "model_state/1.running_var", "model_state/3.rng",
     "optimizer_state", "optimizer_state/m", "optimizer_state/v", "optimizer_state/step", "optimizer_state/velocity"}};

struct Setup {
  ddl::Context ctx;
  std::unique_ptr<ddl::Model> whole = ddl::fuzz::checkpoint_model(ctx, 0), stage = ddl::fuzz::checkpoint_model(ctx, 2);
  std::unique_ptr<ddl::Optimizer> adam = ddl::make_adam(whole->param_count(), {}),
                                  sgd = ddl::make_sgd(whole->param_count(), {.momentum = 0.9f}),
                                  stage_adam = ddl::make_adam(stage->param_count(), {});
  std::string with_adam = ddl::fuzz::scratch() + "/adam.h5", with_sgd = ddl::fuzz::scratch() + "/sgd.h5";
  Setup() {
    ddl::TrainingState state{"fuzz_tiny", 3, 0.5, 1, "model = fuzz_tiny\n", 0};
    state.class_names = {"a", "b", "c"};
    state.input_mean = {0.5};
    state.input_std = {0.25};
    ddl::save_checkpoint(with_adam, *whole, *adam, state);
    ddl::save_checkpoint(with_sgd, *whole, *sgd, {"fuzz_tiny", 1, -1.0, 9, "optimizer = sgd\n", 17});
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ddl::h5::no_cleanup_at_exit();
  ddl::fuzz::set_up_hdf5();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Setup s;
  FuzzedDataProvider in(data, size);
  const std::string path = ddl::fuzz::scratch() + "/last.h5";
  std::filesystem::copy_file(in.ConsumeBool() ? s.with_sgd : s.with_adam, path,
                             std::filesystem::copy_options::overwrite_existing);
  ddl::fuzz::edit_hdf5_file(path, in, kNames);
  ddl::fuzz::expect_success_or_input_error([&] { ddl::load_checkpoint(path, *s.whole, s.adam.get()); });
  ddl::fuzz::expect_success_or_input_error([&] { ddl::load_checkpoint(path, *s.whole, s.sgd.get()); });
  ddl::fuzz::expect_success_or_input_error([&] { ddl::load_checkpoint(path, *s.whole, nullptr); });
  ddl::fuzz::expect_success_or_input_error([&] { ddl::load_checkpoint(path, *s.stage, s.stage_adam.get()); });
  ddl::fuzz::expect_no_open_hdf5_objects();
  return 0;
}
