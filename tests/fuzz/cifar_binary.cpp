// Fuzz target: the CIFAR-10 / CIFAR-100 binary import (ddl_data import --format cifar10|cifar100). Input:
// a flags byte (bit 0: CIFAR-100; bit 1: name the file instead of its folder; bit 2: a class-names file
// follows), then with bit 2 a length byte and that many bytes of class names, then the records file.
#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "core/data/cifar_binary.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t flags = data[0];
  const bool cifar100 = flags & 1;
  std::size_t at = 1;
  const std::string dir = ddl::fuzz::scratch() + "/cifar";
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  std::filesystem::create_directories(dir);
  if ((flags & 4) && at < size) {
    const std::size_t n = std::min<std::size_t>(data[at], size - at - 1);
    ddl::fuzz::write_file(dir + (cifar100 ? "/fine_label_names.txt" : "/batches.meta.txt"), data + at + 1, n);
    at += 1 + n;
  }
  const std::string file = dir + (cifar100 ? "/train.bin" : "/data_batch_1.bin");
  ddl::fuzz::write_file(file, data + at, size - at);
  ddl::fuzz::expect_success_or_input_error([&] {
    const ddl::ImageSet set = ddl::import_cifar_binary(
        {flags & 2 ? file : dir}, cifar100 ? ddl::CifarVariant::cifar100 : ddl::CifarVariant::cifar10);
    ddl::shuffle_split(set, 0.25, 1);
  });
  return 0;
}
