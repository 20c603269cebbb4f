// Imports an image-folder tree, <root>/<class>/<file>.jpg|.jpeg|.png, as torchvision's ImageFolder reads
// it: classes are the sub-directories in sorted order (label = position), files sorted within each. Hidden
// entries (names starting with '.') are skipped; a class folder without images is refused.
// Decoding runs on `threads` workers. With resize = 0 all images must have the same size; with resize = S
// each is scaled (shorter side to S) and centre-cropped to S x S, so sizes may differ.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/data/image_set.hpp"

namespace ddl {

ImageSet import_image_folder(const std::string& root, int threads, int resize = 0);

// The tree's image files and their labels in that order, and the class names, without reading a file.
struct ImageFolderListing {
  std::vector<std::string> files, class_names;
  std::vector<std::int32_t> labels;
};
ImageFolderListing list_image_folder(const std::string& root);

// .jpg, .jpeg or .png, in any case: the files the importer decodes.
bool is_image_file_name(const std::filesystem::path& p);

}  // namespace ddl
