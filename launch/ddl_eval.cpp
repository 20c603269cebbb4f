// ddl_eval: measures a ddl_train checkpoint on a dataset: mean loss, top-1 and top-5 accuracy, accuracy per
// class and the confusion matrix, in evaluation mode (BatchNorm's running statistics, no dropout) with the
// training run's normalisation. Under mpirun each rank evaluates its own contiguous share of the images and
// the counts are summed.
//   ddl_eval --checkpoint best.h5 --data test.h5 [--output eval.csv|eval.json] [--batch-size N] [--threads N]
#include <boost/program_options.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>

#include "comm/communicator.hpp"
#include "comm/mpi_environment.hpp"
#include "core/data/batch_loader.hpp"
#include "core/data/hdf5.hpp"
#include "core/error.hpp"
#include "launch/error_line.hpp"
#include "launch/option_error.hpp"
#include "launch/option_table.hpp"
#include "launch/text_fields.hpp"
#include "launch/thread_count.hpp"
#include "launch/trained_model.hpp"

namespace ddl {
namespace {

namespace po = boost::program_options;

// Larger confusion matrices go to --output only: a row of 1,000 columns is no use on a terminal.
constexpr std::size_t kPrintedClasses = 30;

struct EvalOptions {
  std::string checkpoint, data, output;
  int batch_size = 64;
  int threads = 0;  // 0: this node's cores shared among its ranks
};

using Table = OptionTable<EvalOptions>;

const Table& eval_table() {
  static const Table table = [] {
    Table t;
    t.text("checkpoint", &EvalOptions::checkpoint, "a ddl_train checkpoint", Table::Described::no,
           "a ddl_train checkpoint")
        .text("data", &EvalOptions::data, "a dataset in ddl's format (ddl_data import), one file or its shards",
              Table::Described::no, "a dataset from ddl_data import")
        .text("output", &EvalOptions::output, "also write the results: .csv (a row per class) or .json")
        .number("batch-size", &EvalOptions::batch_size, Range::at_least(1), "images per forward pass and rank")
        .number("threads", &EvalOptions::threads, Range::closed(0, 1024),
                "per rank (0: the node's cores shared among its ranks)");
    return t;
  }();
  return table;
}

std::optional<EvalOptions> parse_options(int argc, char** argv) {
  EvalOptions o;
  po::options_description desc("usage: ddl_eval --checkpoint FILE.h5 --data FILE.h5 [options]");
  desc.add_options()("help,h", "this text");
  std::vector<std::string> texts;
  eval_table().add_to(desc, o, texts);
  po::variables_map vm;
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(option_error_message(e, args));
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return std::nullopt;
  }
  eval_table().finish(o, texts);
  const auto ext = std::filesystem::path(o.output).extension();
  if (!o.output.empty() && ext != ".csv" && ext != ".json")
    throw InputError("--output " + o.output + ": give a .csv or .json file");
  return o;
}

// Sums over the images evaluated, one array so that one all-reduce adds every rank's.
struct EvalSums {
  std::size_t classes;
  std::vector<double> values;  // loss, images, top-1, top-5, then the confusion matrix (true x predicted)
  explicit EvalSums(std::size_t k) : classes(k), values(4 + k * k, 0.0) {}
  double& loss() { return values[0]; }
  double& images() { return values[1]; }
  double& top1() { return values[2]; }
  double& top5() { return values[3]; }
  double& confusion(std::size_t truth, std::size_t predicted) { return values[4 + truth * classes + predicted]; }
};

void add_batch(const Tensor& logits, std::span<const std::int32_t> labels, EvalSums& sums) {
  const std::size_t k = sums.classes, top = std::min<std::size_t>(5, k);
  const float* z = logits.data();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const float* row = z + i * k;
    const auto label = static_cast<std::size_t>(labels[i]);
    const float max = *std::max_element(row, row + k);
    double sum = 0.0;
    for (std::size_t j = 0; j < k; ++j) sum += std::exp(row[j] - max);  // float exp, as the training loss
    sums.loss() += std::log(sum) + max - row[label];
    // Rank of the true class: how many classes score higher (ties count for the true class, as argmax's
    // first index does for the prediction).
    std::size_t higher = 0;
    for (std::size_t j = 0; j < k; ++j) higher += row[j] > row[label] || (row[j] == row[label] && j < label);
    sums.top1() += higher == 0;
    sums.top5() += higher < top;
    sums.confusion(label, static_cast<std::size_t>(std::max_element(row, row + k) - row)) += 1;
    sums.images() += 1;
  }
}

// This rank's share of the images: a contiguous block, so that each rank reads few chunks.
std::vector<std::size_t> my_share(std::size_t n, const Communicator& world) {
  const auto p = static_cast<std::size_t>(world.size()), r = static_cast<std::size_t>(world.rank());
  std::vector<std::size_t> indices(n * (r + 1) / p - n * r / p);
  std::iota(indices.begin(), indices.end(), n * r / p);
  return indices;
}

struct Evaluation {
  EvalOptions options;
  Context ctx;
  TrainedModel trained;
  std::optional<BatchLoader> loader;
  std::size_t images = 0;
};

void set_up(Evaluation& e, const Communicator& world) {
  const EvalOptions& o = e.options;
  omp_set_num_threads(o.threads > 0 ? o.threads : default_threads(world.split_shared().size()));
  e.trained = load_trained_model(o.checkpoint, e.ctx);
  const Model& model = *e.trained.model;
  if (std::filesystem::is_directory(o.data))
    throw InputError("--data " + o.data + " is a folder: import its images first (ddl_data import --from " + o.data +
                     " --output test.h5), or predict on them with ddl_predict");
  const ImageDataset data(o.data);
  const dims_t in = model.input_shape();
  if (data.channels() != in[0])
    throw InputError(o.data + " holds " + std::to_string(data.channels()) + "-channel images; model " + model.name() +
                     " takes " + std::to_string(in[0]) + " channels");
  if (data.num_classes() > static_cast<std::size_t>(model.num_classes()))
    throw InputError(o.data + " has " + std::to_string(data.num_classes()) + " classes; the checkpoint's model has " +
                     std::to_string(model.num_classes()) + " outputs");
  const auto& names = e.trained.state.class_names;
  for (std::size_t c = 0; c < data.num_classes(); ++c)
    if (data.class_names()[c] != names[c] && names[c] != std::to_string(c))
      throw InputError(o.data + ": class " + std::to_string(c) + " is '" + data.class_names()[c] +
                       "', the checkpoint's model was trained with '" + names[c] + "' there");
  if (!o.output.empty() && world.rank() == 0) {  // found now, not after the evaluation
    const auto folder = std::filesystem::path(o.output).parent_path();
    if (!folder.empty() && !std::filesystem::is_directory(folder))
      throw InputError("--output " + o.output + ": there is no folder " + folder.string());
    const std::string probe = o.output + ".tmp";
    const bool writable = static_cast<bool>(std::ofstream(probe));
    std::filesystem::remove(probe);
    if (!writable) throw InputError("--output " + o.output + ": cannot create a file there (not writable?)");
  }
  e.images = data.size();
  e.loader.emplace(o.data, trained_input(e.trained, o.checkpoint), static_cast<std::size_t>(o.batch_size), e.ctx);
}

EvalSums evaluate(Evaluation& e, const Communicator& world) {
  EvalSums sums(static_cast<std::size_t>(e.trained.model->num_classes()));
  e.loader->start(my_share(e.images, world), false, 0, 0);
  while (const Batch* batch = e.loader->next()) {
    const Tensor& logits = e.trained.model->forward(e.ctx, batch->images, Mode::infer);
    add_batch(logits, batch->labels, sums);
  }
  world.allreduce_sum(sums.values);
  return sums;
}

void report(Evaluation& e, EvalSums& s, int ranks) {
  const auto& names = e.trained.state.class_names;
  const std::size_t k = s.classes;
  const double n = s.images();
  std::printf("checkpoint %s: model %s, %zu classes, %llu epochs trained\n", e.options.checkpoint.c_str(),
              e.trained.model->name().c_str(), k, static_cast<unsigned long long>(e.trained.state.epochs_done));
  std::printf("data %s: %.0f images (%d rank%s)\n", e.options.data.c_str(), n, ranks, ranks == 1 ? "" : "s");
  std::printf("loss %.4f  top-1 accuracy %.4f  top-5 accuracy %.4f\n", s.loss() / n, s.top1() / n, s.top5() / n);
  std::vector<double> per_class(k), counts(k);
  for (std::size_t t = 0; t < k; ++t) {
    for (std::size_t p = 0; p < k; ++p) counts[t] += s.confusion(t, p);
    per_class[t] = counts[t] > 0 ? s.confusion(t, t) / counts[t] : 0.0;
  }
  std::printf("per class:\n  %3s %-20s %8s %9s\n", "#", "class", "images", "accuracy");
  for (std::size_t t = 0; t < k; ++t)
    if (counts[t] > 0) std::printf("  %3zu %-20s %8.0f %9.4f\n", t, names[t].c_str(), counts[t], per_class[t]);
  if (k <= kPrintedClasses) {
    std::printf("confusion matrix (rows: true class, columns: predicted class):\n     ");
    for (std::size_t p = 0; p < k; ++p) std::printf(" %6zu", p);
    std::printf("\n");
    for (std::size_t t = 0; t < k; ++t) {
      if (counts[t] == 0) continue;
      std::printf("  %3zu", t);
      for (std::size_t p = 0; p < k; ++p) std::printf(" %6.0f", s.confusion(t, p));
      std::printf("\n");
    }
  } else {
    std::printf("confusion matrix: %zu x %zu, written with --output only\n", k, k);
  }
  const std::string& path = e.options.output;
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw Error("--output " + path + ": cannot create the file");
    char buf[64];
    auto num = [&](double v) {  // counts in full, shares to six digits
      std::snprintf(buf, sizeof buf, v == std::floor(v) ? "%.0f" : "%.6g", v);
      return std::string(buf);
    };
    if (std::filesystem::path(path).extension() == ".json") {
      out << "{\"checkpoint\": " << json_string(e.options.checkpoint) << ", \"data\": " << json_string(e.options.data)
          << ", \"model\": " << json_string(e.trained.model->name()) << ", \"images\": " << num(n)
          << ", \"loss\": " << num(s.loss() / n) << ", \"top1\": " << num(s.top1() / n)
          << ", \"top5\": " << num(s.top5() / n) << ",\n \"classes\": [";
      for (std::size_t t = 0; t < k; ++t)
        out << (t ? ", " : "") << "{\"name\": " << json_string(names[t]) << ", \"images\": " << num(counts[t])
            << ", \"accuracy\": " << num(per_class[t]) << "}";
      out << "],\n \"confusion\": [";
      for (std::size_t t = 0; t < k; ++t) {
        out << (t ? ",\n  [" : "[");
        for (std::size_t p = 0; p < k; ++p) out << (p ? ", " : "") << num(s.confusion(t, p));
        out << "]";
      }
      out << "]}\n";
    } else {
      // A row per true class: its images, accuracy, and its row of the confusion matrix, a column per
      // predicted class; the first row holds the totals (top-1 as its accuracy, loss and top-5 beside).
      out << "class,name,images,accuracy,loss,top5";
      for (std::size_t p = 0; p < k; ++p) out << ",predicted_" << p;
      out << "\nall,," << num(n) << "," << num(s.top1() / n) << "," << num(s.loss() / n) << "," << num(s.top5() / n);
      for (std::size_t p = 0; p < k; ++p) out << ",";
      out << "\n";
      for (std::size_t t = 0; t < k; ++t) {
        out << t << "," << csv_field(names[t]) << "," << num(counts[t]) << "," << num(per_class[t]) << ",,";
        for (std::size_t p = 0; p < k; ++p) out << "," << num(s.confusion(t, p));
        out << "\n";
      }
    }
    if (!out.flush()) throw Error("--output " + path + ": cannot write (disk full?)");
  }
  std::filesystem::rename(tmp, path);
  std::printf("wrote %s\n", path.c_str());
}

void print_error(const Communicator* world, const std::string& message) { print_error_line("ddl_eval", world, message); }

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  using namespace ddl;
  h5::no_cleanup_at_exit();
  MpiEnvironment mpi(&argc, &argv);
  std::optional<Communicator> world;
  Evaluation e;
  std::exception_ptr setup_error;
  bool help = false;
  try {
    world.emplace();
    auto options = parse_options(argc, argv);
    help = !options;
    if (options) {
      e.options = *options;
      set_up(e, *world);
    }
  } catch (...) {
    setup_error = std::current_exception();
  }
  if (!world) {
    print_error(nullptr, describe_exception(setup_error));
    abort_all_ranks(2);
  }
  try {
    // Bad input fails alike on every rank: the lowest failing rank says why, all exit 2.
    const auto failed = world->allgather(setup_error != nullptr);
    const auto first = std::find(failed.begin(), failed.end(), 1u);
    if (first != failed.end()) {
      if (first - failed.begin() == world->rank()) print_error(world->size() > 1 ? &*world : nullptr, describe_exception(setup_error));
      return 2;
    }
    if (help) return 0;
    EvalSums sums = evaluate(e, *world);
    if (world->rank() == 0) report(e, sums, world->size());
    return 0;
  } catch (...) {
    // A read error on one rank: the others wait in the all-reduce, which only an abort ends.
    print_error(&*world, describe_exception(std::current_exception()));
    abort_all_ranks(1);
  }
}
