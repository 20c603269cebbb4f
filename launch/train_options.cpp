#include "launch/train_options.hpp"

#include <boost/program_options.hpp>

#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "launch/option_error.hpp"
#include "launch/option_table.hpp"
#include "models/registry.hpp"

namespace ddl {
namespace po = boost::program_options;

namespace {

std::vector<float> parse_floats(const std::string& text, const char* option) {
  std::vector<float> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      std::size_t used = 0;
      out.push_back(std::stof(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw InputError(std::string("--") + option + ": '" + item + "' is not a number");
    }
  }
  return out;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw InputError(message);
}

// --checkpoint-every: "30min", "90s", "2h", "500steps" or "epoch".
void parse_checkpoint_every(TrainOptions& o, const std::string& text) {
  o.checkpoint_every_seconds = 0;
  o.checkpoint_every_steps = 0;
  if (text == "epoch") return;
  const std::string wrong =
      "--checkpoint-every takes a time (30min, 90s, 2h), a step count (500steps) or epoch, not '" + text + "'";
  double value = 0;
  std::size_t used = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError(wrong);
  }
  require(value > 0 && value <= 1e9, wrong);
  const std::string unit = text.substr(used);
  if (unit == "steps") {
    require(value == std::floor(value), wrong);
    o.checkpoint_every_steps = static_cast<std::uint64_t>(value);
  } else {
    static const std::map<std::string, double> seconds = {{"s", 1.0}, {"min", 60.0}, {"h", 3600.0}};
    const auto it = seconds.find(unit);
    require(it != seconds.end(), wrong);
    o.checkpoint_every_seconds = value * it->second;
  }
}

// A key given twice in a config file is a mistake either way round: say so rather than pick one.
void refuse_repeated_keys(const std::string& text, const std::string& path) {
  std::map<std::string, int> first_line;
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    const auto start = line.find_first_not_of(" \t");
    const auto equals = line.find('=');
    if (start == std::string::npos || line[start] == '#' || equals == std::string::npos || equals < start) continue;
    std::string key = line.substr(start, equals - start);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (key == "mean" || key == "std") continue;  // lists may be given a value a line
    const auto [at, fresh] = first_line.emplace(key, number);
    if (!fresh)
      throw InputError("--config " + path + ": '" + key + "' is given twice (lines " + std::to_string(at->second) +
                       " and " + std::to_string(number) + ")");
  }
}

// Reads the command line, then --config's file (the command line wins). False after printing --help.
bool read_options(int argc, char** argv, const po::options_description& all, po::variables_map& vm) {
  std::vector<std::string> inputs(argv, argv + argc);  // what an error message may quote
  try {
    const auto parsed = po::command_line_parser(argc, argv).options(all).run();
    // Words that belong to no option (a forgotten --val before a path) are not ignored.
    for (const auto& word : po::collect_unrecognized(parsed.options, po::include_positional))
      throw InputError("unexpected argument '" + word + "' (every option starts with --; see --help)");
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << all << "\n";
      return false;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) throw InputError("--config: cannot read " + path);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      refuse_repeated_keys(text, path);
      std::istringstream config_text(text);
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);) inputs.push_back(line);
      po::store(po::parse_config_file(config_text, all), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(option_error_message(e, inputs) + " (see --help)");
  }
  return true;
}

constexpr Word<AllreduceAlgorithm> kAllreduceWords[] = {
    {"ring", AllreduceAlgorithm::ring}, {"hier", AllreduceAlgorithm::hierarchical}, {"mpi", AllreduceAlgorithm::mpi}};
constexpr Word<LrPolicy> kLrScheduleWords[] = {
    {"constant", LrPolicy::constant}, {"step", LrPolicy::step}, {"cosine", LrPolicy::cosine}, {"poly", LrPolicy::poly}};
constexpr Word<PipelineSchedule> kScheduleWords[] = {{"gpipe", PipelineSchedule::gpipe},
                                                     {"1f1b", PipelineSchedule::one_f_one_b}};
constexpr Word<OptimizerKind> kOptimizerWords[] = {{"adam", OptimizerKind::adam},
                                                   {"sgd", OptimizerKind::sgd},
                                                   {"lars", OptimizerKind::lars},
                                                   {"lamb", OptimizerKind::lamb}};
constexpr Word<Normalization> kNormalizeWords[] = {
    {"scale", Normalization::scale}, {"meanstd", Normalization::meanstd}, {"imagenet", Normalization::imagenet}};
constexpr Word<CorruptImages> kCorruptImagesWords[] = {{"refuse", CorruptImages::refuse},
                                                       {"skip", CorruptImages::skip}};
constexpr Word<CacheImages> kCacheImagesWords[] = {
    {"auto", CacheImages::automatic}, {"on", CacheImages::on}, {"off", CacheImages::off}};
constexpr Word<Precision> kPrecisionWords[] = {
    {"f32", Precision::f32}, {"bf16", Precision::bf16}, {"auto", Precision::automatic}};
constexpr Word<WireType> kWireWords[] = {{"f32", WireType::f32}, {"bf16", WireType::bf16}};
constexpr Word<int> kShardStateWords[] = {
    {"auto", TrainOptions::kShardStateAuto}, {"0", 0}, {"1", 1}, {"2", 2}, {"3", 3}};
constexpr Word<OnDivergence> kOnDivergenceWords[] = {{"stop", OnDivergence::stop}, {"resync", OnDivergence::resync}};
constexpr Word<Strategy> kStrategyWords[] = {{"manual", Strategy::manual},
                                             {"auto", Strategy::automatic},
                                             {"data", Strategy::data},
                                             {"pipeline", Strategy::pipeline}};
constexpr Word<Progress> kProgressWords[] = {
    {"auto", Progress::automatic}, {"always", Progress::always}, {"never", Progress::never}};

using Table = OptionTable<TrainOptions>;
using Described = Table::Described;

std::string joined(const std::vector<float>& values) {
  std::ostringstream s;
  for (std::size_t i = 0; i < values.size(); ++i) s << (i ? "," : "") << values[i];
  return s.str();
}

// A whole number of at least `least`, given as text (beside words, or in a list).
int whole_number(const std::string& text, const char* option, int least, const std::string& wrong) {
  const auto v = parse_floats(text, option);
  require(v.size() == 1 && v[0] >= static_cast<float>(least) && v[0] <= 1e9f && v[0] == std::floor(v[0]), wrong);
  return static_cast<int>(v[0]);
}

void model_rows(Table& t) {
  std::string names;
  for (const auto& n : model_names()) names += (names.empty() ? "" : " | ") + n;
  names += " | FILE.onnx (a network exported from PyTorch: docs/onnx.md)";
  t.group("Model")
      .text("model", &TrainOptions::model, names, Described::yes)
      .number("num-classes", &TrainOptions::num_classes, Range::unchecked(),  // 0 or at least 2: check_combinations
              "classes (0: the training set's)")
      .number("image-size", &TrainOptions::image_size, Range::at_least(0),
              "input height = width (0: the model's own; images are resampled to it)")
      .number("dropout", &TrainOptions::dropout, Range::below(1),
              "dropout probability (CNN classifiers; transformer attention and MLP)", Described::yes, "model's")
      .number("patch-size", &TrainOptions::patch_size, Range::at_least(0), "vit: patch size (0: the model's)")
      .number("depth", &TrainOptions::depth, Range::at_least(0), "vit: encoder blocks (0: the model's)")
      .number("width", &TrainOptions::width, Range::at_least(0), "vit: hidden size (0: the model's)")
      .number("heads", &TrainOptions::heads, Range::at_least(0), "vit: attention heads (0: the model's)");
}

void data_rows(Table& t) {
  t.group("Data")
      .text("train", &TrainOptions::train_path, "training set (.h5 from ddl_data import; a shard or the base name)",
            Described::yes, "an .h5 dataset from 'ddl_data import'")
      .text("val", &TrainOptions::val_path, "validation set (.h5)", Described::yes)
      .number("val-fraction", &TrainOptions::val_fraction, Range::half_open(0, 1),
              "hold out this fraction of --train for validation", Described::yes, "0")
      .words("normalize", &TrainOptions::normalize, kNormalizeWords,
             "scale (pixel/255) | meanstd | imagenet (meanstd with ImageNet's mean and std)")
      .converted(
          "mean", "", "per-channel means for meanstd, e.g. 0.485,0.456,0.406 (default: the training set's)",
          [](TrainOptions& o, const std::string& text) { o.mean = parse_floats(text, "mean"); },
          [](const TrainOptions& o) { return joined(o.mean); }, Described::yes, Table::Listed::yes)
      .converted(
          "std", "", "per-channel standard deviations for meanstd",
          [](TrainOptions& o, const std::string& text) { o.stddev = parse_floats(text, "std"); },
          [](const TrainOptions& o) { return joined(o.stddev); }, Described::yes, Table::Listed::yes)
      .flag("random-flip", &TrainOptions::random_flip, "augment: random horizontal flips")
      .flag("random-resized-crop", &TrainOptions::random_resized_crop,
            "augment: torchvision's random-resized-crop (area 8-100%, aspect 3/4-4/3) to the model's input size")
      .number("random-crop-padding", &TrainOptions::random_crop_padding, Range::at_least(0),
              "augment: random crops after zero padding by this many pixels")
      .number("loader-threads", &TrainOptions::loader_threads, Range::closed(0, 1024),
              "threads a rank decodes JPEG files on (a dataset imported with --store encoded; 0: the cores the "
              "compute threads leave, at least one)",
              Described::no)
      .number("val-crop-fraction", &TrainOptions::val_crop_fraction, Range::open_closed(0, 1),
              "encoded datasets' evaluation: the centre crop, this fraction of the shorter side (torchvision's "
              "resize to size / 0.875, then the centre)",
              Described::yes, "0.875")
      .number("prefetch", &TrainOptions::prefetch_batches, Range::closed(1, 64),
              "batches the loader prepares ahead of the step (each one batch of the model's input in memory)",
              Described::no)
      .words("corrupt-images", &TrainOptions::corrupt_images, kCorruptImagesWords,
             "refuse | skip: a JPEG that does not decode ends the run naming it, or is skipped (another image of its "
             "batch takes its place; the count is printed each epoch)",
             Described::no);
}

void optimizer_rows(Table& t) {
  t.group("Optimisation")
      .words("optimizer", &TrainOptions::optimizer, kOptimizerWords,
             "adam | sgd | lars | lamb (layer-wise adaptive, for large global batches)")
      .number("lr", &TrainOptions::lr, Range::above(0), "base learning rate", Described::yes, "0.001")
      .words("lr-schedule", &TrainOptions::lr_policy, kLrScheduleWords, "constant | step | cosine | poly")
      .number("warmup-epochs", &TrainOptions::warmup_epochs, Range::unchecked(), "linear warm-up length in epochs",
              Described::yes, "0")
      .number("lr-step-epochs", &TrainOptions::lr_step_epochs, Range::above(0), "step schedule: epochs between decays",
              Described::yes, "30")
      .number("lr-gamma", &TrainOptions::lr_gamma, Range::above(0), "step schedule: decay factor", Described::yes,
              "0.1")
      .number("lr-power", &TrainOptions::lr_power, Range::above(0), "poly schedule: the power", Described::yes, "2")
      .number("momentum", &TrainOptions::momentum, Range::half_open(0, 1), "sgd and lars momentum", Described::yes,
              "0.9")
      .number("lars-trust", &TrainOptions::lars_trust, Range::at_least(0),
              "lars: the trust coefficient (eta) of the layer-wise learning rate", Described::yes, "0.001")
      .flag("nesterov", &TrainOptions::nesterov, "sgd: Nesterov momentum")
      .number("weight-decay", &TrainOptions::weight_decay, Range::at_least(0),
              "weight decay: L2, added to the gradient (sgd, adam, lars), or decoupled, added to lamb's update; lars "
              "and lamb leave biases and normalisation parameters undecayed",
              Described::yes, "0")
      .number("adam-beta1", &TrainOptions::adam_beta1, Range::half_open(0, 1), "adam and lamb beta1", Described::yes,
              "0.9")
      .number("adam-beta2", &TrainOptions::adam_beta2, Range::half_open(0, 1), "adam and lamb beta2", Described::yes,
              "0.999")
      .number("adam-epsilon", &TrainOptions::adam_epsilon, Range::at_least(0), "adam and lamb epsilon (Keras 1e-7)",
              Described::yes, "1e-07")
      .flag("scale-lr", &TrainOptions::scale_lr, "multiply --lr by the number of ranks (use with --warmup-epochs)");
}

void training_rows(Table& t) {
  t.group("Training")
      .number("epochs", &TrainOptions::epochs, Range::at_least(1), "epochs to train (in all, counting resumed ones)")
      .number("batch-size", &TrainOptions::batch_size, Range::at_least(1), "images per step per rank")
      .number("global-batch", &TrainOptions::global_batch, Range::unchecked(),  // given, at least 1: check_combinations
              "images per step over all ranks, instead of --batch-size: each rank that brings its own images takes "
              "its share, so a job continued on fewer ranks (launch/elastic_run.sh) trains the same steps",
              Described::no)
      .number("steps-per-epoch", &TrainOptions::steps_per_epoch, Range::at_least(0),
              "cap on steps per epoch (0: the whole set; for quick runs)")
      .number("seed", &TrainOptions::seed, Range::unchecked(),
              "seed for initialisation, shuffling, augmentation, dropout")
      .number("label-smoothing", &TrainOptions::label_smoothing, Range::half_open(0, 1),
              "E in [0, 1): train towards (1 - E) on the label and E spread over all classes (PyTorch's "
              "label_smoothing)",
              Described::yes, "0")
      .number("eval-every", &TrainOptions::eval_every, Range::at_least(1),
              "validate every N epochs, and after the last", Described::no)
      .number("target-accuracy", &TrainOptions::target_accuracy, Range::closed(0, 1),
              "end the run at the first validation whose top-1 accuracy reaches this (0: train every epoch)",
              Described::no, "0");
  optimizer_rows(t);
}

void system_rows(Table& t) {
  t.group("System")
      .number("threads", &TrainOptions::threads, Range::closed(0, 1024),
              "compute threads per rank (0: the node's cores / its ranks)", Described::no)
      .words("cache-images", &TrainOptions::cache_images, kCacheImagesWords,
             "auto | on | off: read the training images into memory once, before the first epoch, instead of from "
             "the file every step. auto: where they take at most a quarter of this rank's share of the node's memory",
             Described::no)
      .words("precision", &TrainOptions::precision, kPrecisionWords,
             "f32 | bf16 | auto: bf16 computes convolutions, dense layers and matrix products in bf16 (AVX512-BF16 "
             "or AMX), with bf16 activations between the layers that take them; the loss, the weights, the "
             "gradients and the optimizer stay f32. auto: bf16 where the CPU has those instructions, else f32");
  t.group("Data parallelism (ranks = replicas unless the layers are cut or split)")
      .words("allreduce", &TrainOptions::allreduce_algorithm, kAllreduceWords,
             "gradient all-reduce: ring | hier (shared memory in a node, ring across) | mpi")
      .words("allreduce-wire", &TrainOptions::allreduce_wire, kWireWords,
             "f32 | bf16 (ring: half the bytes, sums in f32)")
      .number("bucket-mb", &TrainOptions::bucket_mb, Range::at_least(0),
              "fuse gradients into buckets of this size, all-reduced during backward (0: after it)", Described::yes,
              "0")
      .words("shard-state", &TrainOptions::shard_state, kShardStateWords,
             "auto | 0 | 1 | 2 | 3: ZeRO's stages. 1: each data-parallel replica keeps the optimizer's state "
             "(momentum, Adam's moments) for 1/replicas of the parameters; the gradients are reduce-scattered and "
             "the parameters all-gathered on the ring, the all-reduce's bytes and sums. 2: the gradients too, each "
             "bucket (--bucket-mb, 25 unless given) reduced during backward to the replicas that own it and the "
             "rest of its memory released. 3: the parameters too, each layer's gathered from their owners before "
             "it runs and released after (half an all-reduce more a step). auto: 0, unless a --strategy on one "
             "node chooses it; under --strategy, 1, 2 or 3 asks for it wherever a layout has replicas, 0 forbids it")
      .flag("recompute", &TrainOptions::recompute,
            "keep only the input of each of about sqrt(layers) segments in forward and run the segment's forward "
            "again before its backward: less activation memory for a second forward of all but the last segment, "
            "the same bits. Under --strategy, it asks for it on every stage of a layout without split layers; else "
            "the planner weighs it per stage");
}

void pipeline_rows(Table& t) {
  t.group("Pipeline (model parallelism; ranks = data-parallel replicas x stages)")
      .number("pipeline-stages", &TrainOptions::pipeline_stages, Range::at_least(1),
              "cut the model's layers into this many stages, one rank each")
      .number("micro-batches", &TrainOptions::micro_batches, Range::at_least(1),
              "split each step's batch into this many micro-batches (gradients accumulate over them)")
      .converted(
          "partition", "", "layers per stage, e.g. 5,4,6 (default: balanced by measured time and memory)",
          [](TrainOptions& o, const std::string& text) {
            for (float count : parse_floats(text, "partition")) {
              // Compared before the cast: a float beyond size_t's range (1e30, inf) does not convert (undefined).
              require(count >= 1 && count <= 1e6f && count == std::floor(count),
                      "--partition takes whole layer counts of at least 1, e.g. 5,4,6");
              o.partition.push_back(static_cast<std::size_t>(count));
            }
          },
          [](const TrainOptions& o) { return to_string(o.partition); }, Described::yes)
      .words("schedule", &TrainOptions::pipeline_schedule, kScheduleWords,
             "gpipe (all forwards, then all backwards) | 1f1b (fewer micro-batches in flight)");
  t.group("Split layers (ranks = replicas x stages x tensor-parallel)")
      .number("tensor-parallel", &TrainOptions::tensor_parallel, Range::at_least(1),
              "split the chosen layers across groups of this many ranks, each holding a share of their parameters: "
              "dense layers (below them each rank trains on its own images, which the group gathers) or transformer "
              "blocks (the group shares one batch)")
      .text("tensor-split", &TrainOptions::tensor_split,
            "which layers split: classifier (the dense layers after the last convolution that the group size "
            "divides), blocks (a transformer's blocks: attention heads and MLP features divided, the group sharing "
            "one batch) or layer indices as the model table numbers them, e.g. 9,11",
            Described::yes);
}

void planner_rows(Table& t) {
  t.group("Planner (the layout chosen from a profile measured at start)")
      .words("strategy", &TrainOptions::strategy, kStrategyWords,
             "manual (the options above) | auto (the fastest predicted layout of replicas, stages, split layers, "
             "micro-batches, sharded optimizer state and recomputed activations that fits the memory limit) | data "
             "| pipeline (the best of those kinds); the global batch is --batch-size times the ranks")
      .number("memory-limit", &TrainOptions::memory_limit_gb, Range::at_least(0),
              "GB per rank a plan may use (default: the node's memory shared among its ranks, less 10%); a plan "
              "keeps 48 MB or 5% under it, the error of its predicted peaks",
              Described::no, "0")
      .flag("plan-only", &TrainOptions::plan_only, "print the plan and stop", Described::no)
      .converted(
          "plan-for", "",
          "RANKS[,RANKS_PER_NODE]: plan a larger cluster from the profile measured here (or --load-profile), print "
          "it and stop (ranks per node: as this job's by default; memory per rank: this node's shared among them, "
          "or --memory-limit)",
          [](TrainOptions& o, const std::string& text) {
            if (text.empty()) return;
            const auto counts = parse_floats(text, "plan-for");
            require((counts.size() == 1 || counts.size() == 2) && counts[0] >= 1 && counts[0] <= 1e6f &&
                        counts[0] == std::floor(counts[0]) &&
                        (counts.size() == 1 || (counts[1] >= 1 && counts[1] <= counts[0])),
                    "--plan-for takes RANKS or RANKS,RANKS_PER_NODE, e.g. 64,16");
            o.plan_for_ranks = static_cast<int>(counts[0]);
            o.plan_for_per_node = counts.size() == 2 ? static_cast<int>(counts[1]) : 0;  // 0: as this job's nodes
            o.plan_only = true;
          },
          [](const TrainOptions& o) {
            if (o.plan_for_ranks == 0) return std::string();
            return std::to_string(o.plan_for_ranks) +
                   (o.plan_for_per_node ? "," + std::to_string(o.plan_for_per_node) : "");
          })
      .text("save-profile", &TrainOptions::save_profile, "write the measured profile to this file (rank 0)")
      .text("load-profile", &TrainOptions::load_profile,
            "plan from this profile file instead of measuring (e.g. a saved one with another network's link "
            "figures)");
  for (auto [name, link, help] :
       {std::tuple{"link-within", &TrainOptions::link_within,
                   "LATENCY_US,GB_PER_S of an all-reduce link within a node, where it cannot be measured (default "
                   "5,5)"},
        std::tuple{"link-between", &TrainOptions::link_between,
                   "LATENCY_US,GB_PER_S between nodes, where it cannot be measured (default 50,1.25: 10 Gbit/s "
                   "Ethernet)"}}) {
    const std::string option = name;
    Link TrainOptions::*member = link;  // clang before 16 cannot capture a structured binding
    t.converted(
        name, "", help,
        [option, member](TrainOptions& o, const std::string& text) {
          if (text.empty()) return;
          const auto v = parse_floats(text, option.c_str());
          require(v.size() == 2 && v[0] >= 0 && v[1] > 0, "--" + option + " takes LATENCY_US,GB_PER_S, e.g. 50,1.25");
          o.*member = {v[0] * 1e-6, v[1] * 1e9};
        },
        [member](const TrainOptions& o) {
          std::ostringstream s;
          s << (o.*member).latency_s * 1e6 << "," << (o.*member).bytes_per_s / 1e9;
          return s.str();
        });
  }
  t.converted(
      "replan-every", "epoch",
      "STEPS | epoch | never: how often a planned run measures its layers and links again and moves to another "
      "layout when one is predicted at least 10% faster",
      [](TrainOptions& o, const std::string& text) {
        if (text == "never") {
          o.replan_every = TrainOptions::kNeverReplan;
        } else if (text != "epoch") {
          o.replan_every =
              whole_number(text, "replan-every", 1,
                           "--replan-every takes a step count of at least 1, epoch or never, not '" + text + "'");
        }
      },
      [](const TrainOptions& o) {
        return o.replan_every == TrainOptions::kNeverReplan       ? std::string("never")
               : o.replan_every == TrainOptions::kReplanEachEpoch ? std::string("epoch")
                                                                  : std::to_string(o.replan_every);
      });
}

void output_rows(Table& t) {
  t.group("Checkpoints")
      .text("checkpoint-dir", &TrainOptions::checkpoint_dir, "write last.h5 and best.h5 here each epoch")
      .converted("checkpoint-every", "30min",
                 "also write last.h5 within an epoch, this often: a time (30min, 90s, 2h), a step count (500steps), or "
                 "epoch (only at epochs' ends); --resume continues from the step after it",
                 parse_checkpoint_every,
                 [](const TrainOptions& o) {
                   std::ostringstream s;
                   if (o.checkpoint_every_steps)
                     s << o.checkpoint_every_steps << "steps";
                   else if (o.checkpoint_every_seconds > 0)
                     s << o.checkpoint_every_seconds << "s";
                   else
                     s << "epoch";
                   return s.str();
                 })
      .converted(
          "resume", "", "continue from this checkpoint, or 'auto' for <checkpoint-dir>/last.h5",
          [](TrainOptions& o, const std::string& text) {
            o.resume_auto = text == "auto";
            o.resume = o.resume_auto ? "" : text;
          },
          [](const TrainOptions& o) { return o.resume_auto ? std::string("auto") : o.resume; })
      .text("init", &TrainOptions::init,
            "start from the weights of this checkpoint (ddl_train's, or launch/import_torch.py's), not its optimizer "
            "state or epochs; a classifier for another class count starts afresh. --resume wins when it finds one",
            Described::yes);
  t.group("Observability")
      .text("metrics", &TrainOptions::metrics_path, "per-epoch figures to this file (.csv, or .jsonl for JSON lines)")
      .text("mlperf-log", &TrainOptions::mlperf_log,
            "write MLPerf Training's :::MLLOG lines to this file: the submission's keys, run and epoch marks, each "
            "evaluation's accuracy and the run's stop (docs/training.md)")
      .text("tensorboard", &TrainOptions::tensorboard_dir,
            "write TensorBoard event files to this folder: the train loss and learning rate every "
            "--tensorboard-every steps, each epoch's figures (docs/faults-and-observability.md lists the tags)")
      .number("tensorboard-every", &TrainOptions::tensorboard_every, Range::at_least(1),
              "STEPS between two per-step points in TensorBoard", Described::no)
      .text("timeline", &TrainOptions::timeline_path,
            "write every rank's forward, backward, communication and data-wait spans to this Chrome trace (.json)")
      .words("progress", &TrainOptions::progress, kProgressWords,
             "progress bar: auto (on a terminal, not under mpirun) | always | never", Described::no)
      .flag("profile", &TrainOptions::profile, "print per-layer forward/backward times", Described::no);
}

void fault_rows(Table& t) {
  t.group("Faults")
      .converted(
          "timeout", "auto",
          "seconds a rank may wait for others in one collective or message before it names them and stops the "
          "job (0: no limit; auto: generous at start-up, then 10x the slowest such wait or step so far, at least "
          "30 s). A fixed limit gives way to 600 s while the job starts (profiling, building the first step) and "
          "while checkpoints are written, where ranks wait on others' legitimately slow work",
          [](TrainOptions& o, const std::string& text) {
            if (text == "auto") return;
            const auto seconds = parse_floats(text, "timeout");
            require(seconds.size() == 1 && seconds[0] >= 0, "--timeout must be auto or a number of seconds >= 0");
            o.timeout_seconds = seconds[0];
          },
          [](const TrainOptions& o) {
            std::ostringstream s;
            if (o.timeout_seconds)
              s << *o.timeout_seconds;
            else
              s << "auto";
            return s.str();
          })
      .number("check-replicas", &TrainOptions::check_replicas, Range::at_least(0),
              "every this many steps (and at each checkpoint, with the optimizer's state) check that all replicas "
              "hold the same parameters (0: never)",
              Described::no)
      .words("on-divergence", &TrainOptions::on_divergence, kOnDivergenceWords,
             "when replicas differ: stop (naming the ranks and the tensor) | resync (copy replica 0's state, log "
             "it, go on)",
             Described::no);
}

// ddl_train's options, in --help's order; the same table each call.
const Table& train_table() {
  static const Table table = [] {
    Table t;
    model_rows(t);
    data_rows(t);
    training_rows(t);
    system_rows(t);
    pipeline_rows(t);
    planner_rows(t);
    output_rows(t);
    fault_rows(t);
    return t;
  }();
  return table;
}

// What --strategy takes from the layout's options, and what it refuses beside it.
void check_strategy(TrainOptions& o, const std::function<bool(const char*)>& given) {
  require(o.strategy != Strategy::manual || !given("replan-every"),
          "--replan-every goes with --strategy auto, data or pipeline (a manual layout is never re-planned)");
  require(o.strategy != Strategy::manual || (!o.plan_only && o.load_profile.empty() && o.save_profile.empty()),
          "--plan-only, --plan-for, --load-profile and --save-profile go with --strategy auto, data or pipeline");
  if (o.strategy == Strategy::manual) return;
  const std::string strategy = option_word(o.strategy);
  require(!given("partition") && !given("tensor-split"),
          "--strategy " + strategy +
              " chooses the cut and the split layers: give --partition and --tensor-split "
              "with --strategy manual");
  if (given("pipeline-stages")) o.fixed_stages = o.pipeline_stages;
  if (given("tensor-parallel")) o.fixed_tensor = o.tensor_parallel;
  if (given("micro-batches")) o.fixed_micro_batches = o.micro_batches;
  // data and pipeline name the kind of layout: an axis given against it would go unused without a word.
  require(o.strategy != Strategy::data || (o.fixed_stages <= 1 && o.fixed_tensor <= 1),
          "--strategy data trains whole replicas: --pipeline-stages and --tensor-parallel above 1 go with "
          "--strategy auto or manual");
  require(o.strategy != Strategy::pipeline || (o.fixed_stages != 1 && o.fixed_tensor <= 1),
          "--strategy pipeline cuts whole layers into 2 stages or more: --pipeline-stages 1 and "
          "--tensor-parallel above 1 go with --strategy auto or manual");
}

// The rules that tie options together, after each option's own check.
void check_combinations(const TrainOptions& o, const std::function<bool(const char*)>& given) {
  require(!given("global-batch") || (!given("batch-size") && !o.scale_lr),
          "--global-batch sets the batch of every rank: give it without --batch-size and --scale-lr");
  require(!given("global-batch") || o.global_batch >= 1, "--global-batch must be at least 1");
  require(o.num_classes == 0 || o.num_classes >= 2, "--num-classes must be at least 2");
  require(!o.nesterov || o.optimizer == OptimizerKind::sgd, "--nesterov goes with --optimizer sgd");
  require(o.warmup_epochs >= 0 && o.warmup_epochs <= static_cast<float>(o.epochs),
          "--warmup-epochs must be between 0 and --epochs (" + std::to_string(o.epochs) +
              "): a longer warm-up never reaches --lr");
  require(o.val_path.empty() || o.val_fraction == 0, "give --val or --val-fraction, not both");
  // Their trust ratio is the norm of a whole layer's weights, which a split layer spreads over ranks.
  require(!o.layerwise_optimizer() || o.tensor_parallel == 1,
          std::string("--optimizer ") + option_word(o.optimizer) +
              " needs whole layers on each rank: it goes without --tensor-parallel");
  if (o.shard_state > 0) require(o.shard_state_refusal().empty(), o.shard_state_refusal());
  // A split layer's forward talks to its group: run again, it would repeat that traffic, which is untested.
  require(!o.recompute || o.tensor_parallel == 1, "--recompute goes without --tensor-parallel");
  require(o.allreduce_wire == WireType::f32 || o.allreduce_algorithm == AllreduceAlgorithm::ring,
          "--allreduce-wire bf16 needs --allreduce ring");
  require(o.normalize == Normalization::meanstd || (o.mean.empty() && o.stddev.empty()),
          std::string("--mean and --std apply to --normalize meanstd, not ") + option_word(o.normalize));
  require(!o.resume_auto || !o.checkpoint_dir.empty(), "--resume auto needs --checkpoint-dir");
  // With --global-batch, the layout checks each rank's share (layout_choice.cpp).
  require(o.global_batch > 0 || o.batch_size % o.micro_batches == 0,
          "--batch-size " + std::to_string(o.batch_size) + " does not split into " + std::to_string(o.micro_batches) +
              " micro-batches");
  require(o.partition.empty() || o.partition.size() == static_cast<std::size_t>(o.pipeline_stages),
          "--partition gives " + std::to_string(o.partition.size()) + " stages, --pipeline-stages is " +
              std::to_string(o.pipeline_stages));
}

}  // namespace

std::string TrainOptions::shard_state_refusal() const {
  if (bucket_mb != 0 && shard_state == 1)
    return "--shard-state 1 reduce-scatters the gradients after backward: it goes without --bucket-mb (2 and 3 take it)";
  // The all-gather carries parameters, which a bf16 wire would round.
  if (allreduce_wire != WireType::f32)
    return "--shard-state all-gathers the parameters in f32: it goes without --allreduce-wire bf16";
  return "";
}

std::string TrainOptions::describe() const { return train_table().describe(*this); }

std::string TrainOptions::describe(const Layout& layout) const {
  TrainOptions planned = *this;
  planned.batch_size = layout.batch;  // what --global-batch gave each rank, too
  if (strategy == Strategy::manual) return planned.describe();
  planned.pipeline_stages = layout.stages;
  planned.tensor_parallel = layout.tensor;
  planned.micro_batches = layout.micro_batches;
  planned.shard_state = layout.shard_state;
  planned.recompute = layout.recomputes_any();
  planned.partition = layout.stages > 1 ? layout.cut : std::vector<std::size_t>{};
  if (!layout.split.empty()) {
    planned.tensor_split.clear();
    for (std::size_t i = 0; i < layout.split.size(); ++i)
      planned.tensor_split += (i ? "," : "") + std::to_string(layout.split[i]);
  }
  return planned.describe();
}

const char* option_word(AllreduceAlgorithm a) { return word_of(a, kAllreduceWords); }
const char* option_word(LrPolicy p) { return word_of(p, kLrScheduleWords); }
const char* option_word(PipelineSchedule s) { return word_of(s, kScheduleWords); }
const char* option_word(OptimizerKind k) { return word_of(k, kOptimizerWords); }
const char* option_word(Normalization n) { return word_of(n, kNormalizeWords); }
const char* option_word(Precision p) { return word_of(p, kPrecisionWords); }
const char* option_word(Strategy s) { return word_of(s, kStrategyWords); }
const char* option_word(WireType w) { return word_of(w, kWireWords); }

std::string options_given(const TrainOptions& o) { return train_table().given(o); }

std::vector<OptionInfo> train_option_list() {
  const TrainOptions defaults;
  std::vector<OptionInfo> list;
  for (const auto& row : train_table().rows())
    list.push_back({row.name, row.group, row.show(defaults), row.flag, row.described});
  return list;
}

std::optional<TrainOptions> parse_train_options(int argc, char** argv) {
  TrainOptions o;
  std::string config;
  std::vector<std::string> texts;
  const Table& table = train_table();
  po::options_description general("General");
  general.add_options()("help,h", "print this help")("config", po::value(&config),
                                                     "read options from this file (key = value lines)");
  po::options_description all(
      "ddl_train: train a model on an HDF5 image dataset (run under mpirun for data parallelism)");
  all.add(general);
  table.add_to(all, o, texts);
  po::variables_map vm;
  if (!read_options(argc, argv, all, vm)) return std::nullopt;
  table.finish(o, texts);
  const auto given = [&](const char* option) { return vm.count(option) && !vm[option].defaulted(); };
  check_strategy(o, given);
  check_combinations(o, given);
  return o;
}

}  // namespace ddl
