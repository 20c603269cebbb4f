// A range [begin, end) of a flat buffer's indices: a replica's shard of the parameters, of the gradients or
// of the optimizer's state.
#pragma once

#include <cstddef>

namespace ddl {

struct IndexRange {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};

}  // namespace ddl
