// Fuzz target: an ONNX model (ddl_train --model FILE.onnx), read, its shape arithmetic folded and its patterns
// rewritten (fuse_patterns.hpp), as the model builder takes it. The input is the file.
#include <cstdint>
#include <string_view>

#include "models/onnx/fuse_patterns.hpp"
#include "models/onnx/onnx_graph.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ddl::fuzz::expect_success_or_input_error([&] {
    ddl::onnx::Graph graph = ddl::onnx::parse_onnx({reinterpret_cast<const char*>(data), size}, "fuzz.onnx");
    ddl::onnx::fold_constants(graph);
    ddl::onnx::fuse_norms_and_activations(graph);
    ddl::onnx::fuse_channel_shuffles(graph);
    ddl::onnx::split_into_slices(graph);
  });
  return 0;
}
