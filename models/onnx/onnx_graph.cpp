// Reading an ONNX file into ddl's Graph: the one file that sees protobuf's generated classes. Every value is
// checked against what the file says of it before anything of that size is allocated, so that a corrupt or
// hostile file ends in one InputError, never in a crash or a huge allocation.
#include "models/onnx/onnx_graph.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "models/onnx/message_text.hpp"

// Inside ddl::onnx, `onnx` names ddl's namespace; ONNX's generated classes are reached through this alias.
namespace pb = ::onnx;

namespace ddl::onnx {
namespace {

// A tensor of more elements (or with a dimension larger) is a corrupt file rather than a model ddl could train.
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 31;

[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw InputError(one_line(source + ": " + problem));
}

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

std::string type_name(int type) {
  // The field is a plain integer in the file: only a valid one may become the enum.
  if (!pb::TensorProto_DataType_IsValid(type)) return "data type " + std::to_string(type);
  return pb::TensorProto_DataType_Name(static_cast<pb::TensorProto_DataType>(type));
}

// `stored` values read from raw_data (little-endian, as ONNX writes it and as ddl's CPUs are) or from the typed
// field, converted to T; nullopt where neither holds exactly n values.
template <typename Stored, typename T, typename Field>
std::optional<std::vector<T>> values(const std::string& raw, const Field& field, std::size_t n) {
  if (!raw.empty()) {
    if (raw.size() != n * sizeof(Stored)) return std::nullopt;
    std::vector<Stored> stored(n);
    std::memcpy(stored.data(), raw.data(), raw.size());
    return std::vector<T>(stored.begin(), stored.end());
  }
  if (static_cast<std::size_t>(field.size()) != n) return std::nullopt;
  return std::vector<T>(field.begin(), field.end());
}

// A tensor of the file as a Constant. `what` names it in messages; `zero_fill`: a tensor without data is
// zeros (its values are kept elsewhere, strip_weights) instead of a truncated file.
Constant to_constant(const pb::TensorProto& t, const std::string& what, const std::string& source, bool zero_fill) {
  const int type = t.data_type();
  const bool integer =
      type == pb::TensorProto::INT64 || type == pb::TensorProto::INT32 || type == pb::TensorProto::BOOL;
  // DOUBLE: a real-number scalar PyTorch writes as one (`x.clamp(min=0.1)`, F.normalize's epsilon), read as FLOAT.
  const bool real = type == pb::TensorProto::FLOAT || type == pb::TensorProto::DOUBLE;
  if (!real && !integer)
    fail(source, what + " is of type " + type_name(type) + ", which ddl does not read (FLOAT, DOUBLE, INT64, INT32, BOOL)");
  if (t.data_location() == pb::TensorProto::EXTERNAL)
    fail(source, what + " keeps its data in another file, which ddl reads from the model's path only");
  Constant c;
  c.integer = integer;
  // The product of the dimensions with each 0 counted as 1 bounds every stride as well as the size.
  std::uint64_t bound = 1, n = 1;
  for (const std::int64_t d : t.dims()) {
    if (d < 0) fail(source, what + " has a negative dimension " + std::to_string(d));
    const auto size = static_cast<std::uint64_t>(d);
    if (size > kMaxElements || (bound *= std::max<std::uint64_t>(size, 1)) > kMaxElements)
      fail(source, what + " has more than 2^31 elements, over ddl's limit for one tensor");
    n *= size;
    c.dims.push_back(d);
  }
  const std::string& raw = t.raw_data();
  if (n > 0 && raw.empty() && t.float_data_size() == 0 && t.double_data_size() == 0 && t.int32_data_size() == 0 &&
      t.int64_data_size() == 0) {
    if (!zero_fill) fail(source, "truncated: " + what + " has no data for its " + std::to_string(n) + " elements");
    if (integer)
      c.ints.resize(n);
    else
      c.floats.resize(n);
    return c;
  }
  bool read = false;
  if (real) {
    auto v = type == pb::TensorProto::FLOAT ? values<float, float>(raw, t.float_data(), n)
                                            : values<double, float>(raw, t.double_data(), n);
    if ((read = v.has_value())) c.floats = std::move(*v);
  } else {
    auto v = type == pb::TensorProto::INT64   ? values<std::int64_t, std::int64_t>(raw, t.int64_data(), n)
             : type == pb::TensorProto::INT32 ? values<std::int32_t, std::int64_t>(raw, t.int32_data(), n)
                                              : values<std::uint8_t, std::int64_t>(raw, t.int32_data(), n);
    if ((read = v.has_value())) c.ints = std::move(*v);
    if (read && type == pb::TensorProto::BOOL)
      for (auto& b : c.ints) b = b != 0;
  }
  if (!read)
    fail(source, what + " " + dims_text(c.dims) + " holds data of another size than its " + std::to_string(n) +
                     " elements of " + type_name(type) + ": truncated or corrupt");
  return c;
}

Attribute to_attribute(const pb::AttributeProto& a, const Node& node, const std::string& source) {
  using Kind = Attribute::Kind;
  const std::string what = node.describe() + ", attribute " + in_quotes(a.name());
  Attribute out;
  switch (a.type()) {
    case pb::AttributeProto::INT:
      out.kind = Kind::integer;
      out.i = a.i();
      break;
    case pb::AttributeProto::FLOAT:
      out.kind = Kind::real;
      out.f = a.f();
      break;
    case pb::AttributeProto::STRING:
      out.kind = Kind::text;
      out.s = a.s();
      break;
    case pb::AttributeProto::INTS:
      out.kind = Kind::integers;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case pb::AttributeProto::FLOATS:
      out.kind = Kind::reals;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case pb::AttributeProto::TENSOR:
      out.kind = Kind::tensor;
      out.t = to_constant(a.t(), what, source, false);
      break;
    default:
      fail(source,
           what + " is of type " + pb::AttributeProto_AttributeType_Name(a.type()) + ", which ddl does not read");
  }
  return out;
}

const pb::TypeProto_Tensor& tensor_type(const pb::ValueInfoProto& v, const std::string& what,
                                        const std::string& source) {
  if (!v.type().has_tensor_type()) fail(source, what + " is not a tensor");
  const auto& t = v.type().tensor_type();
  if (t.elem_type() != pb::TensorProto::FLOAT)
    fail(source, what + " is of type " + type_name(t.elem_type()) + ", not FLOAT");
  return t;
}

// The one image input [batch, C, H, W]: any batch (a name, or the fixed size an exporter writes when told no
// dynamic axes), C, H and W fixed.
void read_input(const pb::ValueInfoProto& v, Graph& g) {
  const std::string what = "input " + in_quotes(v.name());
  const auto& t = tensor_type(v, what, g.source);
  const int rank = t.has_shape() ? t.shape().dim_size() : -1;
  if (rank != 4)
    fail(g.source, what + (rank < 0 ? " has no shape" : " has rank " + std::to_string(rank)) +
                       "; ddl trains a graph of one image input [batch, C, H, W]");
  const char* names[] = {"batch", "C", "H", "W"};
  std::uint64_t pixels = 1;
  for (int d = 1; d < 4; ++d) {
    const auto& dim = t.shape().dim(d);
    if (!dim.has_dim_value() || dim.dim_value() <= 0)
      fail(g.source, what + "'s " + names[d] + " (dimension " + std::to_string(d) +
                         ") is not fixed; ddl needs C, H and W fixed (give dynamic_axes the batch only)");
    if ((pixels *= std::min<std::uint64_t>(dim.dim_value(), kMaxElements)) > kMaxElements)
      fail(g.source, what + " has images of more than 2^31 values");
    g.image_shape.push_back(dim.dim_value());
  }
  g.input = v.name();
}

void read_output(const pb::ValueInfoProto& v, Graph& g) {
  const std::string what = "output " + in_quotes(v.name());
  const auto& t = tensor_type(v, what, g.source);
  const int rank = t.has_shape() ? t.shape().dim_size() : -1;
  if (rank != 2)
    fail(g.source, what + " is not [batch, classes]: " + (rank < 0 ? "no shape" : "rank " + std::to_string(rank)));
  const auto& classes = t.shape().dim(1);
  if (classes.has_dim_value() && classes.dim_value() <= 0)
    fail(g.source, what + " has " + std::to_string(classes.dim_value()) + " classes");
  g.classes = classes.has_dim_value() ? classes.dim_value() : 0;
  g.output = v.name();
}

void read_nodes(const pb::GraphProto& graph, Graph& g) {
  std::set<std::string> known = g.initializers, later;
  known.insert(g.input);
  for (const auto& n : graph.node())
    for (const auto& out : n.output()) later.insert(out);
  for (int i = 0; i < graph.node_size(); ++i) {
    const pb::NodeProto& n = graph.node(i);
    Node node;
    node.op = n.op_type();
    node.name = n.name().empty() ? node.op + "_" + std::to_string(i) : n.name();
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      fail(g.source, node.describe() + " is of domain " + in_quotes(n.domain()) + ", not ONNX's default one");
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    for (const auto& in : node.inputs)
      if (!in.empty() && !known.count(in))
        fail(g.source, node.describe() + ": its input " + in_quotes(in) +
                           (later.count(in) ? " comes from a later node: the graph is not in topological order"
                                            : " comes from no node, initializer or input"));
    for (const auto& out : node.outputs)
      if (!out.empty() && !known.insert(out).second)
        fail(g.source, node.describe() + ": its output " + in_quotes(out) + " has another producer too");
    for (const auto& a : n.attribute()) node.attributes[a.name()] = to_attribute(a, node, g.source);
    g.nodes.push_back(std::move(node));
  }
  if (!known.count(g.output)) fail(g.source, "output " + in_quotes(g.output) + " comes from no node");
}

pb::ModelProto parse_model(std::string_view bytes, const std::string& source) {
  if (bytes.size() > INT_MAX)
    fail(source, "over 2 GB; ddl reads ONNX files of one piece, which protobuf limits to 2 GB");
  pb::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    fail(source, "not an ONNX file, or a truncated one (protobuf cannot read it as a model)");
  if (!model.has_graph()) fail(source, "not an ONNX file (it holds no graph)");
  return model;
}

// The attribute, or nullptr where the node has none; one of another kind is an error.
const Attribute* attribute_of(const Node& node, const std::string& name, Attribute::Kind kind, const char* kind_name) {
  const auto it = node.attributes.find(name);
  if (it == node.attributes.end()) return nullptr;
  if (it->second.kind != kind)
    throw InputError(one_line(node.describe() + ": attribute " + in_quotes(name) + " is not " + kind_name));
  return &it->second;
}

}  // namespace

std::size_t Constant::size() const {
  std::size_t n = 1;
  for (const std::int64_t d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

std::int64_t Node::integer(const std::string& attribute, std::int64_t otherwise) const {
  const Attribute* a = attribute_of(*this, attribute, Attribute::Kind::integer, "an integer");
  return a ? a->i : otherwise;
}

float Node::real(const std::string& attribute, float otherwise) const {
  const Attribute* a = attribute_of(*this, attribute, Attribute::Kind::real, "a real number");
  return a ? a->f : otherwise;
}

std::string Node::text(const std::string& attribute, const std::string& otherwise) const {
  const Attribute* a = attribute_of(*this, attribute, Attribute::Kind::text, "a string");
  return a ? a->s : otherwise;
}

std::vector<std::int64_t> Node::integers(const std::string& attribute, std::vector<std::int64_t> otherwise) const {
  const Attribute* a = attribute_of(*this, attribute, Attribute::Kind::integers, "a list of integers");
  return a ? a->ints : otherwise;
}

namespace {

// The module a torch node name comes from: "/layer1/layer1.0/conv1/Conv" -> "layer1.0.conv1". Each scope is
// a module's name in its parent, except that a container's children carry the container's path already
// ("layer1.0" under "layer1"). Empty for the network's own forward ("/Add").
std::string module_path(const std::string& name) {
  std::string path;
  std::size_t from = 1;
  for (std::size_t slash; (slash = name.find('/', from)) != std::string::npos; from = slash + 1) {
    const std::string scope = name.substr(from, slash - from);
    path = path.empty() || scope.rfind(path + ".", 0) == 0 ? scope : path + "." + scope;
  }
  return path;
}

// The PyTorch call that exports as an operator ddl may refuse, for the messages that name it.
const char* torch_function(const std::string& op) {
  static const std::map<std::string, const char*> functions = {
      {"Cos", "torch.cos"}, {"Sin", "torch.sin"}, {"Tan", "torch.tan"}, {"Atan", "torch.atan"},
      {"Round", "torch.round"}, {"Floor", "torch.floor"}, {"Ceil", "torch.ceil"}, {"Sign", "torch.sign"},
      {"TopK", "torch.topk"}, {"NonZero", "torch.nonzero or a boolean mask"},
      {"ScatterND", "an indexed assignment, x[...] = v"}, {"ScatterElements", "torch.scatter"},
      {"GatherElements", "torch.gather"}, {"GatherND", "indexing by tensors"}, {"Einsum", "torch.einsum"},
      {"CumSum", "torch.cumsum"}, {"Trilu", "torch.triu or torch.tril"}, {"Mod", "torch.fmod"},
      {"ArgMax", "torch.argmax"}, {"ArgMin", "torch.argmin"}, {"GridSample", "F.grid_sample"},
      {"RoiAlign", "torchvision.ops.roi_align"}, {"NonMaxSuppression", "torchvision.ops.nms"},
      {"Loop", "a Python loop over tensor values"}, {"If", "a Python if on a tensor's value"},
      {"RandomUniformLike", "torch.rand_like"}, {"RandomNormalLike", "torch.randn_like"},
      {"Bernoulli", "torch.bernoulli"}, {"LpNormalization", "F.normalize"}, {"DepthToSpace", "nn.PixelShuffle"},
      {"SpaceToDepth", "nn.PixelUnshuffle"}, {"LRN", "nn.LocalResponseNorm"}, {"MaxUnpool", "nn.MaxUnpool2d"},
      {"Unique", "torch.unique"}, {"Det", "torch.det"}};
  const auto it = functions.find(op);
  return it == functions.end() ? nullptr : it->second;
}

}  // namespace

std::string Node::describe() const {
  // torch names a node by its module's scope and the operation: the user finds it by the module's path.
  const char* function = torch_function(op);
  const std::string from = function ? std::string(", ") + function : "";
  if (name.empty() || name[0] != '/') return op + " node " + in_quotes(name) + (function ? " (" + from.substr(2) + ")" : "");
  const std::string module = module_path(name);
  return op + " node in " + (module.empty() ? "the network's own forward" : "module " + module) + " (" + name + from + ")";
}

Graph parse_onnx(std::string_view bytes, const std::string& source, const std::set<std::string>& weights_elsewhere) {
  pb::ModelProto model = parse_model(bytes, source);
  Graph g;
  g.source = source;
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") g.opset = o.version();
  if (g.opset == 0) fail(source, "imports no opset of ONNX's default domain");
  // PyTorch 2.9 and later export through dynamo by default, at opset 18 and up, a graph made for inference
  // (BatchNorms folded away in training mode, equal initializers merged): its TorchScript exporter is the one
  // that keeps the module's parameters apart.
  if (g.opset < kMinOpset || g.opset > kMaxOpset)
    fail(source, "opset " + std::to_string(g.opset) + " outside " + std::to_string(kMinOpset) + "-" +
                     std::to_string(kMaxOpset) +
                     ", the opsets ddl reads (torch.onnx.export(..., opset_version=17), and dynamo=False from "
                     "PyTorch 2.9 on)");
  g.producer = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());

  const pb::GraphProto& graph = model.graph();
  if (graph.sparse_initializer_size() > 0) fail(source, "has sparse initializers, which ddl does not read");
  for (const auto& t : graph.initializer())
    if (!g.initializers.insert(t.name()).second) fail(source, "has two initializers named " + in_quotes(t.name()));
  // Older exporters list the initializers among the inputs too.
  std::vector<const pb::ValueInfoProto*> inputs;
  for (const auto& v : graph.input())
    if (!g.initializers.count(v.name())) inputs.push_back(&v);
  if (inputs.size() != 1)
    fail(source, "has " + std::to_string(inputs.size()) +
                     " inputs besides its initializers; ddl trains a graph of one image input [batch, C, H, W]");
  read_input(*inputs[0], g);
  if (graph.output_size() != 1)
    fail(source,
         "has " + std::to_string(graph.output_size()) + " outputs; ddl trains a graph of one output [batch, classes]");
  read_output(graph.output(0), g);

  // Each initializer's bytes go as soon as its values are read: the weights are held once, not twice.
  for (auto& t : *model.mutable_graph()->mutable_initializer()) {
    g.constants[t.name()] =
        to_constant(t, "initializer " + in_quotes(t.name()), source, weights_elsewhere.count(t.name()));
    std::string().swap(*t.mutable_raw_data());
    google::protobuf::RepeatedField<float>().Swap(t.mutable_float_data());
  }
  read_nodes(graph, g);
  return g;
}

namespace {

// The bytes of one initializer kept in a file beside the model: `location` relative to the model's folder and
// inside it, `offset` and `length` within the file (the whole file where they are left out).
std::string external_bytes(const pb::TensorProto& t, const std::string& model_path) {
  const std::string what = "initializer " + in_quotes(t.name());
  std::string location;
  std::int64_t offset = 0, length = -1;
  for (const auto& entry : t.external_data()) {
    try {
      if (entry.key() == "location") location = entry.value();
      if (entry.key() == "offset") offset = std::stoll(entry.value());
      if (entry.key() == "length") length = std::stoll(entry.value());
    } catch (const std::exception&) {
      fail(model_path, what + "'s external " + entry.key() + " '" + entry.value() + "' is not a number");
    }
  }
  const std::filesystem::path relative(location);
  if (location.empty() || relative.is_absolute() ||
      std::any_of(relative.begin(), relative.end(), [](const auto& part) { return part == ".."; }))
    fail(model_path, what + " keeps its data in '" + location +
                         "', not in a file of the model's folder (ONNX's external data is relative to it)");
  const auto file = std::filesystem::path(model_path).parent_path() / relative;
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(model_path, what + "'s data file " + file.string() + " cannot be opened: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::int64_t size = in.tellg();
  if (length < 0) length = size - offset;
  if (offset < 0 || length < 0 || offset > size || length > size - offset)
    fail(model_path, what + " lies past the end of its data file " + file.string() + " (" + std::to_string(size) +
                         " bytes): truncated?");
  std::string bytes(static_cast<std::size_t>(length), '\0');
  in.seekg(offset);
  if (!in.read(bytes.data(), length)) fail(model_path, "cannot read " + what + " from " + file.string());
  return bytes;
}

// The model with the data that an exporter kept in files beside it (onnx.save(..., save_as_external_data=True))
// read in, so that the rest of ddl and the checkpoints see one file; the bytes as they are where none is.
std::string with_external_data(std::string bytes, const std::string& path) {
  pb::ModelProto model = parse_model(bytes, path);
  bool external = false;
  for (auto& t : *model.mutable_graph()->mutable_initializer()) {
    if (t.data_location() != pb::TensorProto::EXTERNAL) continue;
    t.set_raw_data(external_bytes(t, path));
    t.clear_external_data();
    t.clear_data_location();
    external = true;
  }
  if (!external) return bytes;
  if (model.ByteSizeLong() > INT_MAX)
    fail(path, "over 2 GB with its external data; ddl reads ONNX models of one piece, which protobuf limits to 2 GB");
  return model.SerializeAsString();
}

}  // namespace

std::string read_onnx_bytes(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) fail(path, "a folder, not an ONNX file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  // In one read of the file's size: a vision transformer's file is hundreds of MB, which a character
  // iterator took seconds over.
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) {  // a pipe, or another file without a size: read to its end
    in.clear();
    std::ostringstream all;
    all << in.rdbuf();
    if (in.bad()) fail(path, std::string("cannot read: ") + std::strerror(errno));
    return with_external_data(std::move(all).str(), path);
  }
  in.seekg(0, std::ios::beg);
  std::string bytes(static_cast<std::size_t>(size), '\0');
  if (!in.read(bytes.data(), size)) fail(path, "cannot read all of its " + std::to_string(size) + " bytes");
  return with_external_data(std::move(bytes), path);
}

Graph read_onnx(const std::string& path) { return parse_onnx(read_onnx_bytes(path), path); }

std::string strip_weights(std::string_view bytes, const std::set<std::string>& names) {
  const std::string source = "ONNX model";
  pb::ModelProto model = parse_model(bytes, source);
  std::set<std::string> missing = names;
  for (auto& t : *model.mutable_graph()->mutable_initializer()) {
    if (!missing.erase(t.name())) continue;
    t.clear_raw_data();
    t.clear_float_data();
    t.clear_int32_data();
    t.clear_int64_data();
    t.clear_double_data();
    t.clear_uint64_data();
    t.clear_string_data();
    t.clear_external_data();
    t.clear_data_location();
  }
  if (!missing.empty()) fail(source, "has no initializer " + in_quotes(*missing.begin()) + " whose data to remove");
  return model.SerializeAsString();
}

}  // namespace ddl::onnx
