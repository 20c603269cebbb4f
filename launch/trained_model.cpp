#include "launch/trained_model.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/data/hdf5.hpp"
#include "core/error.hpp"
#include "models/onnx/graph_model.hpp"

namespace ddl {
namespace {

// The model settings a checkpoint was trained with, as ddl_train built its ModelConfig from its options.
ModelConfig model_config(const std::map<std::string, std::string>& values, const std::string& path) {
  auto number = [&](const std::string& key, double fallback) {
    const auto it = values.find(key);
    if (it == values.end()) return fallback;
    try {
      return std::stod(it->second);
    } catch (const std::exception&) {
      throw InputError(path + ": configuration line '" + key + " = " + it->second + "' does not hold a number");
    }
  };
  ModelConfig c;
  c.num_classes = static_cast<int>(number("num-classes", 0));
  c.seed = static_cast<std::uint64_t>(number("seed", 0));
  c.image_size = static_cast<int>(number("image-size", 0));
  c.dropout = static_cast<float>(number("dropout", -1));
  c.patch_size = static_cast<int>(number("patch-size", 0));
  c.depth = static_cast<int>(number("depth", 0));
  c.width = static_cast<int>(number("width", 0));
  c.heads = static_cast<int>(number("heads", 0));
  return c;
}

std::size_t parameters_with(const std::string& model, ModelConfig config, int classes) {
  config.num_classes = classes;
  const auto m = define_model(model, config);
  std::size_t n = 0;
  for (std::size_t i = 0; i < m->num_layers(); ++i) n += m->layer_param_count(i);
  return n;
}

// num-classes 0 means "the training set's", which the configuration does not record; the classifier makes
// the parameter count linear in the class count, so the stored count gives it back.
int classes_from_parameters(const std::string& model, const ModelConfig& config, hsize_t params,
                            const std::string& path) {
  const std::size_t p2 = parameters_with(model, config, 2), per_class = parameters_with(model, config, 3) - p2;
  if (params < p2 || per_class == 0 || (params - p2) % per_class != 0 || (params - p2) / per_class > (1u << 24))
    throw InputError(path + ": holds " + std::to_string(params) + " parameters, which model " + model +
                     " has for no class count (corrupt?)");
  return static_cast<int>(2 + (params - p2) / per_class);
}

// The values of a list in the configuration, one "key += value" line each.
std::vector<double> configuration_list(const std::string& text, const std::string& key) {
  std::vector<double> values;
  std::istringstream lines(text);
  const std::string prefix = key + " += ";
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with(prefix)) values.push_back(std::strtod(line.c_str() + prefix.size(), nullptr));
  return values;
}

// An imported graph's model: the checkpoint's copy of the graph, whose weights it holds itself.
std::shared_ptr<const GraphBytes> stored_graph(const h5::Handle& file, const std::string& path) {
  if (!h5::exists(file, "graph")) return nullptr;
  std::string bytes;
  try {
    const auto stored = h5::read_dataset<std::uint8_t>(file, "graph", path);
    bytes.assign(stored.begin(), stored.end());
  } catch (const Error&) {
    throw InputError(path + ": its graph is damaged (its checksum does not match, or the file is cut short)");
  }
  return graph_without_weights(std::move(bytes), h5::read_strings_attribute(file, "graph_names", path), path);
}

}  // namespace

std::map<std::string, std::string> configuration_values(const std::string& text) {
  std::map<std::string, std::string> values;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (const auto at = line.find(" = "); at != std::string::npos) values[line.substr(0, at)] += line.substr(at + 3);
  return values;
}

TrainedModel load_trained_model(const std::string& path, Context& ctx) {
  std::string model_name, configuration;
  std::shared_ptr<const GraphBytes> graph;
  int classes = 0;  // the training set's, where the checkpoint names them
  hsize_t stored_params = 0;
  {
    h5::Handle file = h5::open_file(path);
    if (!h5::has_attribute(file, "ddl_format") ||
        h5::read_string_attribute(file, "ddl_format", path) != "ddl-checkpoint")
      throw InputError(path + ": not a ddl_train checkpoint");
    model_name = h5::read_string_attribute(file, "model", path);
    configuration = h5::read_string_attribute(file, "configuration", path);
    graph = stored_graph(file, path);
    if (h5::has_attribute(file, "class_names"))
      classes = static_cast<int>(h5::read_strings_attribute(file, "class_names", path).size());
    const auto shape = h5::dataset_shape(h5::open_dataset(file, "params", path), path);
    if (shape.size() == 1) stored_params = shape[0];
  }
  const auto values = configuration_values(configuration);
  TrainedModel t;
  t.config = model_config(values, path);
  t.config.graph = graph;
  // A graph ending otherwise than in a fully connected layer is built for one class count only: its
  // training set's, whose names the checkpoint keeps.
  if (t.config.num_classes <= 0 && graph && classes > 0) t.config.num_classes = classes;
  if (t.config.num_classes <= 0)
    t.config.num_classes = classes_from_parameters(model_name, t.config, stored_params, path);
  t.model = make_model(model_name, t.config, ctx);
  t.state = load_checkpoint(path, *t.model, nullptr);
  // Older checkpoints hold no names; a model given more classes than its data had has outputs without one.
  while (t.state.class_names.size() < static_cast<std::size_t>(t.config.num_classes))
    t.state.class_names.push_back(std::to_string(t.state.class_names.size()));
  return t;
}

Preprocessing trained_input(const TrainedModel& trained, const std::string& path) {
  std::vector<double> mean = trained.state.input_mean, stddev = trained.state.input_std;
  if (mean.empty() && stddev.empty()) {  // a checkpoint of format 2 or older: what its configuration says
    const std::string& text = trained.state.configuration;
    const auto values = configuration_values(text);
    const auto it = values.find("normalize");
    const std::string normalize = it == values.end() ? "scale" : it->second;
    if (normalize == "imagenet") {
      mean.assign(kImageNetMean.begin(), kImageNetMean.end());
      stddev.assign(kImageNetStd.begin(), kImageNetStd.end());
    } else if (normalize == "meanstd") {
      mean = configuration_list(text, "mean");
      stddev = configuration_list(text, "std");
      if (mean.empty())
        throw InputError(path + ": written by an older ddl_train with --normalize meanstd, before checkpoints held "
                         "the training set's mean and std; resume it for one epoch with this ddl_train to store them");
    }
  }
  const dims_t in = trained.model->input_shape();
  const auto channels = static_cast<std::size_t>(in[0]);
  if (!mean.empty() && (mean.size() != channels || stddev.size() != channels ||
                        !std::all_of(stddev.begin(), stddev.end(), [](double s) { return s > 0; })))
    throw InputError(path + ": its input normalisation (" + std::to_string(mean.size()) + " means, " +
                     std::to_string(stddev.size()) + " standard deviations) does not fit a " + std::to_string(channels) +
                     "-channel model with positive deviations (damaged?)");
  Preprocessing input;
  input.out_height = static_cast<int>(in[1]);
  input.out_width = static_cast<int>(in[2]);
  input.normalize_mean_std = !mean.empty();
  input.mean.assign(mean.begin(), mean.end());
  input.stddev.assign(stddev.begin(), stddev.end());
  // An encoded dataset is evaluated on the centre crop the run validated on.
  const auto values = configuration_values(trained.state.configuration);
  if (const auto it = values.find("val-crop-fraction"); it != values.end()) {
    const double fraction = std::strtod(it->second.c_str(), nullptr);
    if (fraction > 0 && fraction <= 1) input.val_crop_fraction = static_cast<float>(fraction);
  }
  return input;
}

}  // namespace ddl
