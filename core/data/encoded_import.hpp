// Imports an image-folder tree into an encoded dataset (ddl_data import --store encoded): each JPEG's bytes
// kept as they are after a check of its header and end marker (no pixel decoded), PNGs and JPEGs whose
// longer side exceeds max_side decoded and written as JPEG at `quality`. Files stream through in batches on
// `threads` workers, so memory stays at a batch of files whatever the tree's size. The order, the split and
// the shards are the pixel importer's (image_set.hpp's shuffled_order): the same seed puts the same image in
// the same place.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/data/image_folder.hpp"

namespace ddl {

struct EncodedImportOptions {
  std::string output, val_output;  // val_output: where the held-out part goes (needed with a val_fraction)
  int shards = 1;
  double val_fraction = 0;
  std::uint64_t seed = 1;
  int threads = 1;
  int quality = 90;  // for what is re-encoded
  int max_side = 0;  // 0: keep every size
};

struct EncodedImportResult {
  std::vector<std::string> written;
  std::size_t train = 0, val = 0, reencoded = 0;
  std::uint64_t input_bytes = 0, stored_bytes = 0;  // the files read, the images' bytes stored
};

// progress(files done, files in all), from the calling thread after each batch.
EncodedImportResult import_encoded(const ImageFolderListing& listing, const EncodedImportOptions& options,
                                   const std::function<void(std::size_t, std::size_t)>& progress);

}  // namespace ddl
