// Imports the CIFAR-10 / CIFAR-100 binary release: fixed-size records of label byte(s) then 3072 bytes of
// 32x32 pixels stored plane by plane (all red, all green, all blue). CIFAR-10 records have one label
// byte; CIFAR-100 records have a coarse and a fine label, and the fine one is used.
// `inputs` are .bin files or directories holding them (data_batch_*.bin or train.bin, in sorted order;
// test files are left out unless named). Class names come from batches.meta.txt / fine_label_names.txt
// next to the files when present.
#pragma once

#include <string>
#include <vector>

#include "core/data/image_set.hpp"

namespace ddl {

enum class CifarVariant { cifar10, cifar100 };

ImageSet import_cifar_binary(const std::vector<std::string>& inputs, CifarVariant variant);

}  // namespace ddl
