// Fuzz target, by hand only (not in the test suite; see dataset_bytes.cpp): a checkpoint file as raw bytes,
// loaded with load_checkpoint as --resume loads one: into a small model
// with every kind of state (convolution and dense parameters, BatchNorm's running statistics, a dropout
// generator), with Adam's state, with SGD's, without an optimizer, and into the second stage of a pipeline
// (a slice of the parameters). The input is the file; the seed corpus holds checkpoints of this model.
#include <cstdint>
#include <memory>

#include "core/data/hdf5.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/checkpoint.hpp"
#include "tests/fuzz/checkpoint_model.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

struct Models {
  ddl::Context ctx;
  std::unique_ptr<ddl::Model> whole = ddl::fuzz::checkpoint_model(ctx, 0), stage = ddl::fuzz::checkpoint_model(ctx, 2);
  std::unique_ptr<ddl::Optimizer> adam = ddl::make_adam(whole->param_count(), {}),
                                  sgd = ddl::make_sgd(whole->param_count(), {.momentum = 0.9f}),
                                  stage_adam = ddl::make_adam(stage->param_count(), {});
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ddl::h5::no_cleanup_at_exit();
  ddl::fuzz::set_up_hdf5();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Models m;
  const std::string path = ddl::fuzz::scratch() + "/last.h5";
  ddl::fuzz::write_file(path, data, size);
  ddl::fuzz::expect_success_or_input_error([&] { ddl::load_checkpoint(path, *m.whole, m.adam.get()); });
  ddl::fuzz::expect_success_or_input_error([&] { ddl::load_checkpoint(path, *m.whole, m.sgd.get()); });
  ddl::fuzz::expect_success_or_input_error([&] { ddl::load_checkpoint(path, *m.whole, nullptr); });
  ddl::fuzz::expect_success_or_input_error([&] { ddl::load_checkpoint(path, *m.stage, m.stage_adam.get()); });
  ddl::fuzz::expect_no_open_hdf5_objects();
  return 0;
}
