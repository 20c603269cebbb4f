#include "core/data/image_folder.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/data/image_decode.hpp"
#include "core/data/image_resize.hpp"
#include "core/error.hpp"

namespace ddl {
namespace fs = std::filesystem;

namespace {

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

}  // namespace

ImageSet import_image_folder(const std::string& root, int threads, int resize) {
  if (!fs::is_directory(root)) throw InputError(root + ": not a directory");
  ImageSet set;
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory()) set.class_names.push_back(entry.path().filename().string());
  std::sort(set.class_names.begin(), set.class_names.end());
  if (set.class_names.empty()) throw InputError(root + ": no class sub-directories (<root>/<class>/<image>)");
  for (std::size_t c = 0; c < set.class_names.size(); ++c) {
    std::vector<std::string> class_files;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / set.class_names[c]))
      if (entry.is_regular_file() && is_image(entry.path())) class_files.push_back(entry.path().string());
    std::sort(class_files.begin(), class_files.end());
    files.insert(files.end(), class_files.begin(), class_files.end());
    set.labels.insert(set.labels.end(), class_files.size(), static_cast<std::int32_t>(c));
  }
  if (files.empty()) throw InputError(root + ": no .jpg, .jpeg or .png files under its class directories");

  // The first image fixes the size (unless resizing); the workers check every other image against it.
  if (resize < 0) throw InputError("--resize must be positive");
  if (resize > 0) {
    set.height = set.width = resize;
  } else {
    const DecodedImage first = decode_image(files[0]);
    set.height = first.height;
    set.width = first.width;
  }
  set.channels = 3;
  set.pixels.resize(files.size() * set.image_bytes());

  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < files.size();) {
      try {
        DecodedImage img = decode_image(files[i]);
        if (resize > 0) {
          img.rgb = resize_image(img.rgb.data(), img.height, img.width, 3, center_square(img.height, img.width),
                                 resize, resize);
          img.height = img.width = resize;
        }
        if (img.height != set.height || img.width != set.width)
          throw InputError(files[i] + ": image is " + std::to_string(img.height) + "x" + std::to_string(img.width) +
                           ", the others " + std::to_string(set.height) + "x" + std::to_string(set.width));
        std::memcpy(set.pixels.data() + i * set.image_bytes(), img.rgb.data(), set.image_bytes());
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = files.size();
      }
    }
  };
  std::vector<std::jthread> workers;
  for (int t = 0; t < std::max(1, threads); ++t) workers.emplace_back(work);
  workers.clear();  // joins
  if (failure) std::rethrow_exception(failure);
  return set;
}

}  // namespace ddl
