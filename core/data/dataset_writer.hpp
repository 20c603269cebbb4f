// Writes an ImageSet as one HDF5 file or as K shard files in the ddl image format, each file written to
// a temporary name and renamed into place, so a reader never sees half a file.
#pragma once

#include <string>
#include <vector>

#include "core/data/image_set.hpp"

namespace ddl {

// Returns the paths written. Shard i holds images [i*N/K, (i+1)*N/K).
std::vector<std::string> write_image_dataset(const ImageSet& set, const std::string& path, int shards);

}  // namespace ddl
