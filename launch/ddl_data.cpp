// ddl_data: imports images into ddl's HDF5 dataset format and describes datasets.
//   ddl_data import --from DIR [--format folder|cifar10|cifar100] --output OUT.h5 [--shards K]
//                   [--val-fraction F --seed S [--val-output VAL.h5]] [--threads N] [--resize S]
//   ddl_data info FILE.h5
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "core/data/cifar_binary.hpp"
#include "core/data/dataset_writer.hpp"
#include "core/data/image_dataset.hpp"
#include "core/data/image_folder.hpp"
#include "core/data/image_resize.hpp"
#include "core/data/hdf5.hpp"
#include "core/error.hpp"

namespace ddl {
namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage =
    "usage: ddl_data import --from DIR|FILE... --output OUT.h5 [options]\n"
    "       ddl_data info FILE.h5\n";

std::string detect_format(const std::vector<std::string>& inputs) {
  const fs::path first(inputs.at(0));
  if (fs::is_directory(first)) {
    for (const auto& e : fs::directory_iterator(first)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("data_batch_", 0) == 0) return "cifar10";
      if (name == "train.bin") return "cifar100";
    }
    return "folder";
  }
  if (first.extension() == ".bin") {
    const auto size = fs::file_size(first);
    if (size % 3073 == 0) return "cifar10";
    if (size % 3074 == 0) return "cifar100";
  }
  throw InputError(inputs[0] + ": cannot tell the format; pass --format folder|cifar10|cifar100");
}

// Every image scaled to size x size (CIFAR's are square, so nothing is cropped).
ImageSet resized(const ImageSet& set, int size) {
  ImageSet out = set;
  out.height = out.width = size;
  out.pixels.resize(set.size() * out.image_bytes());
  const CropBox whole = center_square(set.height, set.width);
  for (std::size_t i = 0; i < set.size(); ++i) {
    const auto img = resize_image(set.pixels.data() + i * set.image_bytes(), set.height, set.width, set.channels,
                                  whole, size, size);
    std::copy(img.begin(), img.end(), out.pixels.begin() + static_cast<std::ptrdiff_t>(i * out.image_bytes()));
  }
  return out;
}

int run_import(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string format = "auto", output, val_output;
  int shards = 1, threads = 0, resize = 0;
  double val_fraction = 0.0;
  std::uint64_t seed = 1;
  po::options_description opts("ddl_data import");
  opts.add_options()("help,h", "print this help")("from", po::value(&inputs)->multitoken(),
                                                  "an image-folder root (<class>/<image>), or CIFAR binary files/dirs")(
      "format", po::value(&format)->default_value(format), "auto | folder | cifar10 | cifar100")(
      "output", po::value(&output), "dataset to write (.h5); with --shards K, <stem>-0000i-of-0000K.h5")(
      "shards", po::value(&shards)->default_value(1), "number of shard files")(
      "val-fraction", po::value(&val_fraction)->default_value(0.0), "hold out this random fraction in a separate file")(
      "val-output", po::value(&val_output), "where the held-out part goes (default <stem>_val.h5)")(
      "seed", po::value(&seed)->default_value(seed), "seed of the shuffle and the split")(
      "threads", po::value(&threads)->default_value(0), "decoding threads (0: all cores)")(
      "resize", po::value(&resize)->default_value(0),
      "scale each image's shorter side to S and keep the centre S x S (0: keep the images' own size)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(std::string(e.what()) + " (see ddl_data import --help)");
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  if (inputs.empty() || output.empty()) throw InputError("import needs --from and --output");
  if (resize < 0) throw InputError("--resize must be positive (or 0 to keep the size)");
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (format == "auto") format = detect_format(inputs);

  const auto t0 = std::chrono::steady_clock::now();
  ImageSet set;
  if (format == "folder") {
    if (inputs.size() != 1) throw InputError("--format folder takes one root directory");
    set = import_image_folder(inputs[0], threads, resize);
  } else if (format == "cifar10" || format == "cifar100") {
    set = import_cifar_binary(inputs, format == "cifar10" ? CifarVariant::cifar10 : CifarVariant::cifar100);
    if (resize > 0) set = resized(set, resize);
  } else {
    throw InputError("--format must be auto, folder, cifar10 or cifar100");
  }
  const double decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto [train, val] = shuffle_split(set, val_fraction, seed);
  auto written = write_image_dataset(train, output, shards);
  if (val.size() > 0) {
    if (val_output.empty()) {
      const fs::path p(output);
      val_output = (p.parent_path() / (p.stem().string() + "_val" + p.extension().string())).string();
    }
    for (auto& f : write_image_dataset(val, val_output, 1)) written.push_back(f);
  } else if (val_fraction > 0) {
    throw InputError("--val-fraction " + std::to_string(val_fraction) + " of " + std::to_string(set.size()) +
                     " images holds out nothing");
  }
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "imported %zu images (%dx%dx%d, %zu classes) in %.2f s (decoding %.2f s, %d threads): %zu train, %zu "
      "validation\n",
      set.size(), set.height, set.width, set.channels, set.class_names.size(), total_s, decode_s, threads, train.size(),
      val.size());
  for (const auto& f : written) std::printf("  wrote %s\n", f.c_str());
  return 0;
}

int run_info(const std::vector<std::string>& args) {
  if (args.size() != 1) throw InputError("info takes one dataset file");
  ImageDataset ds(args[0]);
  std::printf("dataset %s\n  images %zu, shape %dx%dx%d (H x W x C), %zu classes, format version 1\n", args[0].c_str(),
              ds.size(), ds.height(), ds.width(), ds.channels(), ds.num_classes());
  std::printf("  shards %zu\n", ds.files().size());
  for (std::size_t s = 0; s < ds.files().size(); ++s)
    std::printf("    %s: %zu images\n", ds.files()[s].c_str(), ds.shard_size(s));
  std::vector<std::size_t> counts(ds.num_classes(), 0);
  for (auto l : ds.labels()) ++counts[static_cast<std::size_t>(l)];
  std::printf("  images per class:\n");
  for (std::size_t c = 0; c < counts.size(); ++c)
    std::printf("    %3zu %-20s %zu\n", c, ds.class_names()[c].c_str(), counts[c]);
  std::printf("  channel mean");
  for (double m : ds.channel_mean()) std::printf(" %.4f", m);
  std::printf(", std");
  for (double s : ds.channel_std()) std::printf(" %.4f", s);
  std::printf("\n");
  return 0;
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  ddl::h5::no_cleanup_at_exit();
  if (argc < 2) {
    std::fputs(ddl::kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "import") return ddl::run_import(args);
    if (command == "info") return ddl::run_info(args);
    if (command == "--help" || command == "-h") {
      std::fputs(ddl::kUsage, stdout);
      return 0;
    }
    throw ddl::InputError("unknown command '" + command + "'\n" + ddl::kUsage);
  } catch (const ddl::InputError& e) {
    std::fprintf(stderr, "ddl_data: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddl_data: error: %s\n", e.what());
    return 1;
  }
}
