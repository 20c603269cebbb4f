// The pieces of the import's messages: names come from the file, and a control character in one must not
// break a message's one line; dimensions as "[64, 3, 7, 7]".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddl::onnx {

inline std::string one_line(std::string text) {
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return text;
}

inline std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string text = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

}  // namespace ddl::onnx
