// Fuzz target, by hand only (not in the test suite): an image dataset file as raw bytes, opened as
// ddl_train opens one, then every image read. HDF5's own parser of the bytes fails within seconds
// (hdf5_edits.hpp says why the suite fuzzes the files' structure instead); this target finds such failures
// and whatever ddl does with what HDF5 returns. The input is the file.
#include <cstdint>
#include <vector>

#include "core/data/hdf5.hpp"
#include "core/data/image_dataset.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ddl::h5::no_cleanup_at_exit();
  ddl::fuzz::set_up_hdf5();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ddl::fuzz::scratch() + "/dataset.h5";
  ddl::fuzz::write_file(path, data, size);
  ddl::fuzz::expect_success_or_input_error([&] {
    ddl::ImageDataset ds(path);
    std::vector<std::size_t> per_class(ds.num_classes(), 0);
    for (auto label : ds.labels()) ++per_class.at(static_cast<std::size_t>(label));
    std::vector<std::uint8_t> pixels(ds.image_bytes());
    for (std::size_t i = 0; i < ds.size(); ++i) ds.read(std::span<const std::size_t>(&i, 1), pixels);
  });
  ddl::fuzz::expect_no_open_hdf5_objects();
  return 0;
}
