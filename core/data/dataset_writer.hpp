// Writes an ImageSet as one HDF5 file or as K shard files in the ddl image format, each file written to
// a temporary name and renamed into place, so a reader never sees half a file. A write that fails (a full
// disk) removes its temporary file and the shards it had written, and names the system's reason.
#pragma once

#include <string>
#include <vector>

#include "core/data/image_set.hpp"

namespace ddl {

// Returns the paths written. Shard i holds images [i*N/K, (i+1)*N/K).
std::vector<std::string> write_image_dataset(const ImageSet& set, const std::string& path, int shards);
// Removes these files, ignoring any that are gone: what a failed import wrote is of no use.
void remove_files(const std::vector<std::string>& paths);

}  // namespace ddl
