#include "core/data/cifar_binary.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.hpp"

namespace ddl {
namespace fs = std::filesystem;

namespace {

constexpr int kSide = 32, kPlane = kSide * kSide, kPixels = 3 * kPlane;

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line != "\r") lines.push_back(line.back() == '\r' ? line.substr(0, line.size() - 1) : line);
  return lines;
}

std::vector<fs::path> expand(const std::vector<std::string>& inputs, CifarVariant variant) {
  std::vector<fs::path> files;
  for (const auto& in : inputs) {
    if (fs::is_regular_file(in)) {
      files.emplace_back(in);
    } else if (fs::is_directory(in)) {
      std::vector<fs::path> found;
      for (const auto& e : fs::directory_iterator(in)) {
        const std::string name = e.path().filename().string();
        const bool train = variant == CifarVariant::cifar10 ? name.rfind("data_batch_", 0) == 0 : name == "train.bin";
        if (train && e.path().extension() == ".bin") found.push_back(e.path());
      }
      std::sort(found.begin(), found.end());
      if (found.empty()) throw InputError(in + ": no CIFAR training batches (data_batch_*.bin or train.bin) found");
      files.insert(files.end(), found.begin(), found.end());
    } else {
      throw InputError(in + ": no such file or directory");
    }
  }
  if (files.empty()) throw InputError("no CIFAR binary files given");
  return files;
}

}  // namespace

ImageSet import_cifar_binary(const std::vector<std::string>& inputs, CifarVariant variant) {
  const int label_bytes = variant == CifarVariant::cifar10 ? 1 : 2;
  const int num_classes = variant == CifarVariant::cifar10 ? 10 : 100;
  const std::size_t record = label_bytes + kPixels;
  ImageSet set{kSide, kSide, 3, {}, {}, {}};
  const auto files = expand(inputs, variant);
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<unsigned char> data{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (data.empty() || data.size() % record != 0)
      throw InputError(f.string() + ": " + std::to_string(data.size()) + " bytes is not a whole number of " +
                       std::to_string(record) + "-byte CIFAR records (wrong --format?)");
    const std::size_t n = data.size() / record, base = set.labels.size();
    set.pixels.resize((base + n) * kPixels);
    for (std::size_t i = 0; i < n; ++i) {
      const unsigned char* r = data.data() + i * record;
      const int label = r[label_bytes - 1];
      if (label >= num_classes)
        throw InputError(f.string() + ": record " + std::to_string(i) + " has label " + std::to_string(label) +
                         ", CIFAR-" + std::to_string(num_classes) + " has " + std::to_string(num_classes) + " classes");
      set.labels.push_back(label);
      unsigned char* out = set.pixels.data() + (base + i) * kPixels;
      for (int p = 0; p < kPlane; ++p)
        for (int c = 0; c < 3; ++c) out[p * 3 + c] = r[label_bytes + c * kPlane + p];
    }
  }
  const fs::path dir = files.front().parent_path();
  const fs::path meta = dir / (variant == CifarVariant::cifar10 ? "batches.meta.txt" : "fine_label_names.txt");
  if (fs::exists(meta)) set.class_names = read_lines(meta);
  if (set.class_names.size() != static_cast<std::size_t>(num_classes)) {
    set.class_names.clear();
    for (int c = 0; c < num_classes; ++c) set.class_names.push_back("class_" + std::to_string(c));
  }
  return set;
}

}  // namespace ddl
