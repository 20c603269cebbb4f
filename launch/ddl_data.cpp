// ddl_data: imports images into ddl's HDF5 dataset format and describes datasets.
//   ddl_data import --from DIR [--format folder|cifar10|cifar100] --output OUT.h5 [--shards K]
//                   [--val-fraction F --seed S [--val-output VAL.h5]] [--threads N] [--resize S]
//                   [--store pixels|encoded [--quality Q] [--max-side N]]
//   ddl_data info FILE.h5       (a dataset, or a checkpoint of ddl_train)
//   ddl_data model NAME [--num-classes N] [--image-size S] [--patch-size P --depth L --width D --heads H]
//                               (the model's parameters and layer state, a line each, as checkpoints name them)
#include <unistd.h>
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "core/data/cifar_binary.hpp"
#include "core/data/dataset_writer.hpp"
#include "core/data/encoded_import.hpp"
#include "core/data/hdf5.hpp"
#include "core/data/image_dataset.hpp"
#include "core/data/image_folder.hpp"
#include "core/data/image_resize.hpp"
#include "core/error.hpp"
#include "core/train/checkpoint.hpp"
#include "launch/option_error.hpp"
#include "launch/option_table.hpp"
#include "launch/trained_model.hpp"
#include "models/onnx/graph_model.hpp"
#include "models/registry.hpp"

namespace ddl {
namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage =
    "usage: ddl_data import --from DIR|FILE... --output OUT.h5 [options]\n"
    "       ddl_data info FILE.h5   (a dataset or a checkpoint)\n"
    "       ddl_data model NAME [--num-classes N] [--image-size S] ...   (its parameters and state)\n";

enum class ImportFormat { automatic, folder, cifar10, cifar100 };
enum class Store { pixels, encoded };
constexpr Word<ImportFormat> kFormatWords[] = {{"auto", ImportFormat::automatic},
                                               {"folder", ImportFormat::folder},
                                               {"cifar10", ImportFormat::cifar10},
                                               {"cifar100", ImportFormat::cifar100}};
constexpr Word<Store> kStoreWords[] = {{"pixels", Store::pixels}, {"encoded", Store::encoded}};

ImportFormat detect_format(const std::vector<std::string>& inputs) {
  const fs::path first(inputs.at(0));
  if (fs::is_directory(first)) {
    for (const auto& e : fs::directory_iterator(first)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("data_batch_", 0) == 0) return ImportFormat::cifar10;
      if (name == "train.bin") return ImportFormat::cifar100;
    }
    return ImportFormat::folder;
  }
  if (first.extension() == ".bin") {
    const auto size = fs::file_size(first);
    if (size % 3073 == 0) return ImportFormat::cifar10;
    if (size % 3074 == 0) return ImportFormat::cifar100;
  }
  throw InputError(inputs[0] + ": cannot tell the format; pass --format folder|cifar10|cifar100");
}

// An output path must name a file in an existing directory; found now rather than after decoding.
void check_output(const std::string& path, const std::string& option) {
  if (fs::is_directory(path))
    throw InputError(option + " " + path + " is a directory; give a file name, such as " +
                     (fs::path(path) / "train.h5").string());
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::is_directory(dir))
    throw InputError(option + " " + path + ": directory " + dir.string() + " does not exist");
}

// Every image scaled to size x size (CIFAR's are square, so nothing is cropped).
ImageSet resized(const ImageSet& set, int size) {
  ImageSet out = set;
  out.height = out.width = size;
  out.pixels.resize(set.size() * out.image_bytes());
  const CropBox whole = center_square(set.height, set.width);
  for (std::size_t i = 0; i < set.size(); ++i) {
    const auto img = resize_image(set.pixels.data() + i * set.image_bytes(), set.height, set.width, set.channels,
                                  whole, size, size);
    std::copy(img.begin(), img.end(), out.pixels.begin() + static_cast<std::ptrdiff_t>(i * out.image_bytes()));
  }
  return out;
}

std::string default_val_output(const std::string& output) {
  const fs::path p(output);
  return (p.parent_path() / (p.stem().string() + "_val" + p.extension().string())).string();
}

// A line redrawn on a terminal, or a line every tenth of the way otherwise: files, rate, time left.
class ImportProgress {
 public:
  void operator()(std::size_t done, std::size_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = done / std::max(s, 1e-9);
    const bool terminal = isatty(STDOUT_FILENO);
    if (!terminal && done * 10 / total == shown_ * 10 / total && done != total) return;
    shown_ = done;
    const double left = (total - done) / std::max(rate, 1e-9);
    std::printf("%simporting %zu/%zu files  %.0f files/s  %.0f s left%s", terminal ? "\r" : "", done, total, rate, left,
                terminal && done != total ? "  " : "\n");
    std::fflush(stdout);
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::size_t shown_ = 0;
};

int import_encoded_folder(const std::vector<std::string>& inputs, const EncodedImportOptions& o) {
  if (inputs.size() != 1) throw InputError("--format folder takes one root directory");
  const auto t0 = std::chrono::steady_clock::now();
  const ImageFolderListing listing = list_image_folder(inputs[0]);
  ImportProgress progress;
  const EncodedImportResult r = import_encoded(listing, o, std::ref(progress));
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "imported %zu images (encoded, %zu classes; %zu re-encoded at quality %d) in %.2f s (%.0f files/s, %d "
      "threads): %zu train, %zu validation; %.1f MB stored for %.1f MB of files (%.3fx)\n",
      r.train + r.val, listing.class_names.size(), r.reencoded, o.quality, total_s,
      (r.train + r.val) / std::max(total_s, 1e-9), o.threads, r.train, r.val, r.stored_bytes / 1e6, r.input_bytes / 1e6,
      static_cast<double>(r.stored_bytes) / std::max<double>(r.input_bytes, 1));
  for (const auto& f : r.written) std::printf("  wrote %s\n", f.c_str());
  return 0;
}

// What `ddl_data import` is told.
struct ImportArgs {
  std::vector<std::string> inputs;
  std::string output, val_output;
  ImportFormat format = ImportFormat::automatic;
  Store store = Store::pixels;
  int shards = 1, threads = 0, resize = 0, quality = 90, max_side = 0;
  double val_fraction = 0.0;
  std::uint64_t seed = 1;
};

using ImportTable = OptionTable<ImportArgs>;

const ImportTable& import_table() {
  static const ImportTable table = [] {
    ImportTable t;
    t.texts("from", &ImportArgs::inputs, "an image-folder root (<class>/<image>), or CIFAR binary files/dirs",
            "an image folder or CIFAR binary files")
        .words("format", &ImportArgs::format, kFormatWords, "auto | folder | cifar10 | cifar100")
        .text("output", &ImportArgs::output, "dataset to write (.h5); with --shards K, <stem>-0000i-of-0000K.h5",
              ImportTable::Described::no, "the dataset to write")
        .number("shards", &ImportArgs::shards, Range::closed(1, 100000), "number of shard files")
        .number("val-fraction", &ImportArgs::val_fraction, Range::half_open(0, 1),
                "hold out this random fraction in a separate file")
        .text("val-output", &ImportArgs::val_output, "where the held-out part goes (default <stem>_val.h5)")
        .number("seed", &ImportArgs::seed, Range::unchecked(), "seed of the shuffle and the split")
        .number("threads", &ImportArgs::threads, Range::closed(0, 1024), "decoding threads (0: all cores)")
        .number("resize", &ImportArgs::resize, Range::at_least(0),
                "scale each image's shorter side to S and keep the centre S x S (0: keep the images' own size)")
        .words("store", &ImportArgs::store, kStoreWords,
               "pixels: decoded, every image one size | encoded: each JPEG file's bytes as they are, any size (PNGs "
               "and images over --max-side written as JPEG at --quality); the loader decodes them (an image folder "
               "only)")
        .number("quality", &ImportArgs::quality, Range::closed(1, 100),
                "--store encoded: JPEG quality of what is re-encoded")
        .number("max-side", &ImportArgs::max_side, Range::at_least(0),
                "--store encoded: re-encode images whose longer side exceeds N, scaled to N (0: keep every size)");
    return t;
  }();
  return table;
}

// Nullopt after printing --help.
std::optional<ImportArgs> parse_import(const std::vector<std::string>& args) {
  ImportArgs a;
  po::options_description opts("ddl_data import");
  opts.add_options()("help,h", "print this help");
  std::vector<std::string> texts;
  import_table().add_to(opts, a, texts);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(option_error_message(e, args) + " (see ddl_data import --help)");
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return std::nullopt;
  }
  import_table().finish(a, texts);
  // Checked before decoding, which may take minutes.
  for (const auto& in : a.inputs)
    if (!fs::exists(in)) throw InputError("--from " + in + ": no such file or directory");
  check_output(a.output, "--output");
  if (!a.val_output.empty()) check_output(a.val_output, "--val-output");
  if (a.threads == 0) a.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (a.format == ImportFormat::automatic) a.format = detect_format(a.inputs);
  if (a.store == Store::encoded) {
    if (a.format != ImportFormat::folder)
      throw InputError("--store encoded takes an image folder (<root>/<class>/<image>)");
    if (a.resize > 0) throw InputError("--store encoded keeps each image's size: give --max-side, not --resize");
  }
  if (a.val_output.empty()) a.val_output = default_val_output(a.output);
  return a;
}

int import_pixels(const ImportArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  ImageSet set;
  if (a.format == ImportFormat::folder) {
    if (a.inputs.size() != 1) throw InputError("--format folder takes one root directory");
    set = import_image_folder(a.inputs[0], a.threads, a.resize);
  } else {
    set = import_cifar_binary(a.inputs,
                              a.format == ImportFormat::cifar10 ? CifarVariant::cifar10 : CifarVariant::cifar100);
    if (a.resize > 0) set = resized(set, a.resize);
  }
  const double decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto [train, val] = shuffle_split(set, a.val_fraction, a.seed);
  if (a.val_fraction > 0 && val.size() == 0)
    throw InputError("--val-fraction " + std::to_string(a.val_fraction) + " of " + std::to_string(set.size()) +
                     " images holds out nothing");
  auto written = write_image_dataset(train, a.output, a.shards);
  if (val.size() > 0) {
    try {
      for (auto& f : write_image_dataset(val, a.val_output, 1)) written.push_back(f);
    } catch (...) {
      remove_files(written);  // half an import: the training part alone was not asked for
      throw;
    }
  }
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "imported %zu images (%dx%dx%d, %zu classes) in %.2f s (decoding %.2f s, %d threads): %zu train, %zu "
      "validation\n",
      set.size(), set.height, set.width, set.channels, set.class_names.size(), total_s, decode_s, a.threads,
      train.size(), val.size());
  for (const auto& f : written) std::printf("  wrote %s\n", f.c_str());
  return 0;
}

int run_import(const std::vector<std::string>& args) {
  const std::optional<ImportArgs> a = parse_import(args);
  if (!a) return 0;
  if (a->store == Store::encoded)
    return import_encoded_folder(a->inputs, {a->output, a->val_output, a->shards, a->val_fraction, a->seed,
                                             a->threads, a->quality, a->max_side});
  return import_pixels(*a);
}

// A checkpoint is read by load_checkpoint, into the model it names: what it describes is what --resume
// would restore, and a damaged checkpoint is refused here as it would be there.
void describe_checkpoint(const std::string& path) {
  Context ctx;
  const TrainedModel t = load_trained_model(path, ctx);
  const auto& model = t.model;
  const TrainingState& state = t.state;
  const ModelConfig& config = t.config;
  const auto values = configuration_values(state.configuration);
  auto value = [&](const std::string& key) {
    const auto it = values.find(key);
    return it == values.end() ? std::string("?") : it->second;
  };
  std::printf("checkpoint %s (ddl_train --checkpoint-dir)\n", path.c_str());
  std::printf("  model %s, %d classes, %zu parameters in %zu tensors, %zu state tensors\n", state.model_name.c_str(),
              config.num_classes, model->whole_param_count(), model->param_entries().size(), model->state().size());
  std::printf("  epochs done %llu", static_cast<unsigned long long>(state.epochs_done));
  if (state.steps_done > 0)
    std::printf(" (stopped %llu steps into epoch %llu)", static_cast<unsigned long long>(state.steps_done),
                static_cast<unsigned long long>(state.epochs_done + 1));
  if (state.best_accuracy >= 0)
    std::printf(", best validation accuracy %.4f", state.best_accuracy);
  else
    std::printf(", not validated");
  std::printf(", seed %llu\n", static_cast<unsigned long long>(state.seed));
  if (values.count("imported-from"))
    std::printf("  weights imported from %s by launch/import_torch.py (no optimizer state: ddl_train --init takes it)\n",
                value("imported-from").c_str());
  else
    std::printf("  optimizer %s, lr %s, batch size %s per rank, trained from %s\n", value("optimizer").c_str(),
                value("lr").c_str(), value("batch-size").c_str(), value("train").c_str());
  std::printf("  configuration (every option of the run):\n");
  std::istringstream lines(state.configuration);
  for (std::string line; std::getline(lines, line);) std::printf("    %s\n", line.c_str());
}

void describe_dataset(const std::string& path) {
  ImageDataset ds(path);
  if (ds.encoded()) {
    int low = ds.image_height(0), high = low;
    for (std::size_t i = 0; i < ds.size(); ++i)
      for (const int side : {ds.image_height(i), ds.image_width(i)}) {
        low = std::min(low, side);
        high = std::max(high, side);
      }
    std::printf("dataset %s\n  images %zu, encoded JPEG files, sides %d to %d pixels, %zu classes, format version 2\n",
                path.c_str(), ds.size(), low, high, ds.num_classes());
  } else {
    std::printf("dataset %s\n  images %zu, shape %dx%dx%d (H x W x C), %zu classes, format version 1\n", path.c_str(),
                ds.size(), ds.height(), ds.width(), ds.channels(), ds.num_classes());
  }
  std::printf("  shards %zu\n", ds.files().size());
  for (std::size_t s = 0; s < ds.files().size(); ++s)
    std::printf("    %s: %zu images\n", ds.files()[s].c_str(), ds.shard_size(s));
  std::vector<std::size_t> counts(ds.num_classes(), 0);
  for (auto l : ds.labels()) ++counts[static_cast<std::size_t>(l)];
  std::printf("  images per class:\n");
  for (std::size_t c = 0; c < counts.size(); ++c)
    std::printf("    %3zu %-20s %zu\n", c, ds.class_names()[c].c_str(), counts[c]);
  std::printf("  channel mean");
  for (double m : ds.channel_mean()) std::printf(" %.4f", m);
  std::printf(", std");
  for (double s : ds.channel_std()) std::printf(" %.4f", s);
  std::printf("\n");
}

bool is_checkpoint(const std::string& path) {
  if (!fs::is_regular_file(path)) return false;  // perhaps the base name of a sharded dataset
  h5::Handle file = h5::open_file(path);
  return h5::has_attribute(file, "ddl_format") &&
         h5::read_string_attribute(file, "ddl_format", path) == "ddl-checkpoint";
}

int run_info(const std::vector<std::string>& args) {
  if (args.size() != 1) throw InputError("info takes one dataset or checkpoint file");
  if (is_checkpoint(args[0]))
    describe_checkpoint(args[0]);
  else
    describe_dataset(args[0]);
  return 0;
}

// What launch/import_torch.py needs to write a checkpoint for a model: every parameter's and every
// layer state's name and shape, in the order checkpoints keep them.
const OptionTable<ModelConfig>& model_table() {
  static const OptionTable<ModelConfig> table = [] {
    OptionTable<ModelConfig> t;
    t.number("num-classes", &ModelConfig::num_classes, Range::at_least(1), "classes")
        .number("image-size", &ModelConfig::image_size, Range::at_least(0), "input height and width (0: the model's)")
        .number("patch-size", &ModelConfig::patch_size, Range::at_least(0), "vit: patch size (0: the model's)")
        .number("depth", &ModelConfig::depth, Range::at_least(0), "vit: encoder blocks (0: the model's)")
        .number("width", &ModelConfig::width, Range::at_least(0), "vit: hidden size (0: the model's)")
        .number("heads", &ModelConfig::heads, Range::at_least(0), "vit: attention heads (0: the model's)");
    return t;
  }();
  return table;
}

int run_model(const std::vector<std::string>& args) {
  std::string name;
  ModelConfig config;
  config.num_classes = 10;
  po::options_description opts("ddl_data model NAME");
  opts.add_options()("help,h", "print this help");
  std::vector<std::string> texts;
  model_table().add_to(opts, config, texts);
  po::options_description hidden;
  hidden.add_options()("name", po::value(&name));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description positional;
  positional.add("name", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(option_error_message(e, args) + " (see ddl_data model --help)");
  }
  if (vm.count("help")) {
    std::cout << opts << "\nPrints \"param NAME DIMS...\" and \"state NAME SIZE\" lines.\n";
    return 0;
  }
  if (name.empty()) {
    std::string known;
    for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("model needs a model name (" + known + ")");
  }
  model_table().finish(config, texts);
  if (is_graph_file(name)) config.graph = read_graph_file(name);
  Context ctx;
  const auto model = make_model(name, config, ctx);
  const dims_t in = model->input_shape();
  std::printf("model %s: input %lld x %lld x %lld, %d classes, %zu parameters\n", name.c_str(),
              static_cast<long long>(in[0]), static_cast<long long>(in[1]), static_cast<long long>(in[2]),
              model->num_classes(), model->param_count());
  for (const auto& e : model->param_entries()) {
    std::printf("param %s", e.name.c_str());
    for (const auto d : e.spec.dims) std::printf(" %lld", static_cast<long long>(d));
    std::printf("\n");
  }
  for (const auto& s : model->state())
    if (!s.floats.empty()) std::printf("state %s %zu\n", s.name.c_str(), s.floats.size());
  return 0;
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  ddl::h5::no_cleanup_at_exit();
  if (argc < 2) {
    std::fputs(ddl::kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "import") return ddl::run_import(args);
    if (command == "info") return ddl::run_info(args);
    if (command == "model") return ddl::run_model(args);
    if (command == "--help" || command == "-h") {
      std::fputs(ddl::kUsage, stdout);
      return 0;
    }
    throw ddl::InputError("unknown command '" + command + "'\n" + ddl::kUsage);
  } catch (const ddl::InputError& e) {
    std::fprintf(stderr, "ddl_data: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddl_data: error: %s\n", e.what());
    return 1;
  }
}
