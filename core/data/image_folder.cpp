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

// Names starting with '.' are the file system's or a tool's (.DS_Store, ._x.jpg from macOS, .ipynb_checkpoints),
// never a user's class or image.
bool is_hidden(const fs::path& p) { return p.filename().string().starts_with('.'); }

}  // namespace

bool is_image_file_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

ImageFolderListing list_image_folder(const std::string& root) {
  if (!fs::exists(root)) throw InputError(root + ": no such directory");
  if (!fs::is_directory(root)) throw InputError(root + ": not a directory");
  ImageFolderListing out;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && !is_hidden(entry.path())) out.class_names.push_back(entry.path().filename().string());
  std::sort(out.class_names.begin(), out.class_names.end());
  if (out.class_names.empty()) throw InputError(root + ": no class sub-directories (<root>/<class>/<image>)");
  std::vector<std::string> empty_classes;
  for (std::size_t c = 0; c < out.class_names.size(); ++c) {
    std::vector<std::string> class_files;
    const fs::path dir = fs::path(root) / out.class_names[c];
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file() && !is_hidden(entry.path()) && is_image_file_name(entry.path()))
        class_files.push_back(entry.path().string());
    if (class_files.empty()) empty_classes.push_back(dir.string());
    std::sort(class_files.begin(), class_files.end());
    out.files.insert(out.files.end(), class_files.begin(), class_files.end());
    out.labels.insert(out.labels.end(), class_files.size(), static_cast<std::int32_t>(c));
  }
  // A class without images would still be a label the model must predict and never sees: refused, as
  // torchvision's ImageFolder refuses it, naming the folders.
  if (!empty_classes.empty()) {
    std::string names;
    for (const auto& d : empty_classes) names += (names.empty() ? "" : ", ") + d;
    throw InputError(std::string(empty_classes.size() == 1 ? "a class folder has" : "class folders have") +
                     " no .jpg, .jpeg or .png image: " + names + " (add images or remove the folder)");
  }
  return out;
}

ImageSet import_image_folder(const std::string& root, int threads, int resize) {
  ImageFolderListing listing = list_image_folder(root);
  ImageSet set;
  set.class_names = std::move(listing.class_names);
  set.labels = std::move(listing.labels);
  const std::vector<std::string>& files = listing.files;

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
