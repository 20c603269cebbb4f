// ddl_predict: runs a ddl_train checkpoint on JPEG/PNG images and prints, a line per image, the most likely
// classes with their probabilities (softmax). Images are prepared as ddl_data import --resize and the loader
// prepare training images: the centred square of a photo of another shape, resized (bilinear) to the
// model's input, normalised as in training; evaluation mode.
//   ddl_predict --checkpoint best.h5 IMAGE... | FOLDER... [--top 5] [--csv | --logits] [--batch-size N]
//               [--threads N]
#include <boost/program_options.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>

#include "core/data/batch_loader.hpp"
#include "core/data/hdf5.hpp"
#include "core/data/image_decode.hpp"
#include "core/data/image_folder.hpp"
#include "core/data/image_resize.hpp"
#include "core/error.hpp"
#include "launch/option_error.hpp"
#include "launch/option_table.hpp"
#include "launch/text_fields.hpp"
#include "launch/thread_count.hpp"
#include "launch/trained_model.hpp"

namespace ddl {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

struct PredictOptions {
  std::string checkpoint;
  std::vector<std::string> inputs;
  int top = 5;
  bool csv = false;
  bool logits = false;
  int batch_size = 32;
  int threads = 0;
};

using Table = OptionTable<PredictOptions>;

const Table& predict_table() {
  static const Table table = [] {
    Table t;
    t.text("checkpoint", &PredictOptions::checkpoint, "a ddl_train checkpoint", Table::Described::no,
           "a ddl_train checkpoint")
        .number("top", &PredictOptions::top, Range::at_least(1), "classes shown per image")
        .flag("csv", &PredictOptions::csv, "CSV: image, then class and probability for each of the top classes")
        .flag("logits", &PredictOptions::logits,
              "CSV: image, then the model's raw output (before softmax) for every class, to 9 digits")
        .number("batch-size", &PredictOptions::batch_size, Range::at_least(1), "images per forward pass")
        .number("threads", &PredictOptions::threads, Range::closed(0, 1024), "0: every core");
    return t;
  }();
  return table;
}

std::optional<PredictOptions> parse_options(int argc, char** argv) {
  PredictOptions o;
  po::options_description desc("usage: ddl_predict --checkpoint FILE.h5 IMAGE|FOLDER... [options]");
  desc.add_options()("help,h", "this text");
  std::vector<std::string> texts;
  predict_table().add_to(desc, o, texts);
  po::options_description hidden;
  hidden.add_options()("input", po::value(&o.inputs));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description positional;
  positional.add("input", -1);
  po::variables_map vm;
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(option_error_message(e, args));
  }
  if (vm.count("help")) {
    std::cout << desc << "\nA FOLDER stands for the .jpg, .jpeg and .png files under it, in name order.\n";
    return std::nullopt;
  }
  predict_table().finish(o, texts);
  if (o.inputs.empty()) throw InputError("give one or more images or folders of images");
  if (o.csv && o.logits) throw InputError("--csv and --logits are two output formats: give one");
  return o;
}

// Files as given; folders as the images under them (hidden ones skipped, as the importer does).
std::vector<std::string> image_paths(const std::vector<std::string>& inputs) {
  std::vector<std::string> paths;
  for (const auto& input : inputs) {
    if (!fs::exists(input)) throw InputError(input + ": no such file or folder");
    if (!fs::is_directory(input)) {
      paths.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(input); it != fs::recursive_directory_iterator(); ++it) {
      if (it->path().filename().string().starts_with(".")) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && is_image_file_name(it->path())) found.push_back(it->path().string());
    }
    if (found.empty()) throw InputError(input + ": no .jpg, .jpeg or .png images in this folder");
    std::sort(found.begin(), found.end());
    paths.insert(paths.end(), found.begin(), found.end());
  }
  return paths;
}

void print_predictions(const std::vector<std::string>& paths, const Tensor& logits, std::size_t classes,
                       const std::vector<std::string>& names, const PredictOptions& o) {
  const std::size_t top = std::min<std::size_t>(static_cast<std::size_t>(o.top), classes);
  const float* z = logits.data();
  std::vector<double> p(classes);
  std::vector<std::size_t> order(classes);
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const float* row = z + i * classes;
    const float max = *std::max_element(row, row + classes);
    double sum = 0;
    for (std::size_t j = 0; j < classes; ++j) sum += p[j] = std::exp(static_cast<double>(row[j] - max));
    for (auto& v : p) v /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
    std::string line = o.csv ? csv_field(paths[i]) : paths[i] + ":";
    for (std::size_t r = 0; r < top; ++r) {
      char prob[32];
      std::snprintf(prob, sizeof prob, "%.4f", p[order[r]]);
      line += o.csv ? "," : (r ? ", " : " ");
      line += o.csv ? csv_field(names[order[r]]) : names[order[r]];
      line += o.csv ? "," : " ";
      line += prob;
    }
    std::puts(line.c_str());
  }
}

void print_logits(const std::vector<std::string>& paths, const Tensor& logits, std::size_t classes) {
  for (std::size_t i = 0; i < paths.size(); ++i) {
    std::string line = csv_field(paths[i]);
    for (std::size_t j = 0; j < classes; ++j) {
      char value[32];
      std::snprintf(value, sizeof value, ",%.9g", logits.data()[i * classes + j]);
      line += value;
    }
    std::puts(line.c_str());
  }
}

int predict(const PredictOptions& o) {
  omp_set_num_threads(o.threads > 0 ? o.threads : default_threads(1));
  Context ctx;
  const TrainedModel t = load_trained_model(o.checkpoint, ctx);
  const Preprocessing input = trained_input(t, o.checkpoint);
  const auto paths = image_paths(o.inputs);
  const dims_t in = t.model->input_shape();
  if (in[0] != 3)
    throw InputError("model " + t.model->name() + " takes " + std::to_string(in[0]) +
                     "-channel images; ddl_predict reads images as RGB");
  const auto classes = static_cast<std::size_t>(t.model->num_classes());
  if (o.logits) {
    std::string header = "image";
    for (const auto& name : t.state.class_names) header.append(",").append(csv_field(name));
    std::puts(header.c_str());
  } else if (o.csv) {
    std::string header = "image";
    for (int r = 1; r <= std::min<int>(o.top, static_cast<int>(classes)); ++r)
      header += ",class_" + std::to_string(r) + ",probability_" + std::to_string(r);
    std::puts(header.c_str());
  }
  const std::size_t plane = static_cast<std::size_t>(in[0] * in[1] * in[2]);
  for (std::size_t begin = 0; begin < paths.size(); begin += static_cast<std::size_t>(o.batch_size)) {
    const std::vector<std::string> batch(paths.begin() + static_cast<std::ptrdiff_t>(begin),
                                         paths.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                             paths.size(), begin + static_cast<std::size_t>(o.batch_size))));
    Tensor images(plain_desc({static_cast<dnnl::memory::dim>(batch.size()), in[0], in[1], in[2]}), ctx.engine());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const DecodedImage img = decode_image(batch[i]);
      // As ddl_data import --resize prepares photos of another shape: the centred square, resized.
      const CropBox box = img.height != img.width && in[1] == in[2] ? center_square(img.height, img.width)
                                                                     : CropBox{0, 0, static_cast<float>(img.height),
                                                                               static_cast<float>(img.width)};
      prepare_image(img.rgb.data(), img.height, img.width, 3, input, images.data() + i * plane, box);
    }
    ctx.begin_step(0);
    const Tensor& out = t.model->forward(ctx, images, Mode::infer);
    if (o.logits)
      print_logits(batch, out, classes);
    else
      print_predictions(batch, out, classes, t.state.class_names, o);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  ddl::h5::no_cleanup_at_exit();
  try {
    const auto options = ddl::parse_options(argc, argv);
    return options ? ddl::predict(*options) : 0;
  } catch (const ddl::InputError& e) {
    std::fprintf(stderr, "ddl_predict: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddl_predict: error: %s\n", e.what());
    return 1;
  }
}
