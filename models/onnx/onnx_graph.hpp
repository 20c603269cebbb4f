// An ONNX model (a file that torch.onnx.export wrote) in ddl's own terms: its nodes in topological order,
// its constant tensors, its one image input and its one logits output. No protobuf type leaves
// onnx_graph.cpp, so the rest of ddl never sees ONNX's generated classes.
//
// Reading checks what ddl needs of any graph: a readable ModelProto, an opset of the default domain in
// [kMinOpset, kMaxOpset], exactly one input that is not an initializer, shaped [batch, C, H, W] with C, H and
// W fixed, and exactly one output, [batch, classes]. What a node means is for the layer builder to check.
//
// Shape arithmetic (Shape, Constant, ConstantOfShape, Gather, Unsqueeze, Squeeze, Concat, Cast, Slice,
// Equal, Where, Expand, Range, Add/Sub/Mul/Div on integers, Reshape and Transpose of a constant: F.pad's
// pads) is folded into constants once the input's [C, H, W] is known, so that the graph left computes only
// on images. The batch is free: folding runs for two batch sizes, and an integer that differs between them
// is a multiple k of the batch, kept as kBatch * k (a Reshape to [kBatch, -1] keeps the batch and flattens
// the rest).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ddl::onnx {

inline constexpr std::int64_t kMinOpset = 13, kMaxOpset = 17;
// In a folded integer tensor: the batch size, which the graph does not fix; kBatch * k is k times it.
inline constexpr std::int64_t kBatch = -2147483647;

// A tensor known before any image is seen: an initializer, a Constant node's value, or folded shape
// arithmetic. Float tensors (weights, statistics, scalars) in `floats`, integer ones (shapes, indices,
// axes) in `ints`; booleans are integers 0 and 1.
struct Constant {
  std::vector<std::int64_t> dims;
  bool integer = false;
  std::vector<float> floats;
  std::vector<std::int64_t> ints;

  std::size_t size() const;  // the product of dims (1 for a scalar)
};

struct Attribute {
  enum class Kind { integer, real, text, integers, reals, tensor } kind = Kind::integer;
  std::int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<std::int64_t> ints;
  std::vector<float> floats;
  std::optional<Constant> t;
};

struct Node {
  std::string op;    // op_type, e.g. "Conv"
  std::string name;  // the file's node name, or "<op>_<index>" where it gives none
  std::vector<std::string> inputs, outputs;  // "" for an omitted optional input
  std::map<std::string, Attribute> attributes;

  // The attribute's value, or `otherwise` where the node has none; an attribute of another kind is an
  // InputError naming the node and the attribute.
  std::int64_t integer(const std::string& attribute, std::int64_t otherwise) const;
  float real(const std::string& attribute, float otherwise) const;
  std::string text(const std::string& attribute, const std::string& otherwise) const;
  std::vector<std::int64_t> integers(const std::string& attribute, std::vector<std::int64_t> otherwise) const;
  // How messages name a node: by the module its torch name comes from, "Conv node in module layer1.0.conv1
  // (/layer1/layer1.0/conv1/Conv)", with the PyTorch call behind an operator ddl may refuse ("Cos node in
  // module sa (/sa/Cos, torch.cos)"); a node named otherwise by its name, "Relu node 'Relu_1'".
  std::string describe() const;
};

struct Graph {
  std::string source;  // the file's path, or what the bytes came from: the start of every message
  std::int64_t opset = 0;
  std::string producer;  // producer_name and version, e.g. "pytorch 1.13.0"
  std::string input, output;  // value names
  std::vector<std::int64_t> image_shape;  // the input's [C, H, W]
  std::int64_t classes = 0;  // the output's second dimension, 0 where the file leaves it free
  std::vector<Node> nodes;   // topological order; after folding, only those that compute on images or parameters
  std::map<std::string, Constant> constants;
  std::set<std::string> initializers;  // the names of constants that were initializers in the file
  // Where the batch is in a value computed on images, where folding learned it: the axis that is `per_batch`
  // times the batch size ([tokens, batch * heads, features] after attention's reshape: axis 1, 2 a batch).
  struct BatchAxis {
    int axis = 0;
    std::int64_t per_batch = 1;
  };
  std::map<std::string, BatchAxis> batch_axes;
  // The dims of each value computed on images for a batch of 1, where folding learned them.
  std::map<std::string, std::vector<std::int64_t>> dims;
};

// Parses and checks a model; `source` names it in messages. Initializers listed in `weights_elsewhere`
// may come without data (a checkpoint keeps them: strip_weights) and are then zero-filled constants of their
// dims. Throws InputError with one line naming `source` and the problem: not an ONNX file, truncated,
// an opset outside [kMinOpset, kMaxOpset], inputs or outputs other than one image batch and one
// [batch, classes], a node whose input nothing produces, a graph that is not in topological order.
Graph parse_onnx(std::string_view bytes, const std::string& source,
                 const std::set<std::string>& weights_elsewhere = {});
// The bytes of the file at `path` (a folder, a missing or an unreadable file is an InputError naming it), with
// the data of initializers kept in files beside it (ONNX's external data) read in: one model, whole.
std::string read_onnx_bytes(const std::string& path);
// Reads `path` and parses it.
Graph read_onnx(const std::string& path);
// Folds the shape arithmetic into constants for images of graph.image_shape (see the top of this file);
// an operation on constants that it cannot fold is an InputError naming the node.
void fold_constants(Graph& graph);
// The same file with the data of these initializers removed (their names, types and dims kept), for a
// checkpoint that stores their values itself; parse_onnx(..., names) reads it back.
std::string strip_weights(std::string_view bytes, const std::set<std::string>& names);

}  // namespace ddl::onnx
