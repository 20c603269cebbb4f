#include "launch/train_options.hpp"

#include <boost/program_options.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <iostream>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "launch/option_error.hpp"
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
void parse_checkpoint_every(const std::string& text, TrainOptions& o) {
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

// An option's words and the values they name, for the options parsed into enums.
template <typename Enum>
struct Word {
  const char* text;
  Enum value;
};
constexpr Word<AllreduceAlgorithm> kAllreduceWords[] = {
    {"ring", AllreduceAlgorithm::ring}, {"hier", AllreduceAlgorithm::hierarchical}, {"mpi", AllreduceAlgorithm::mpi}};
constexpr Word<LrPolicy> kLrScheduleWords[] = {
    {"constant", LrPolicy::constant}, {"step", LrPolicy::step}, {"cosine", LrPolicy::cosine}, {"poly", LrPolicy::poly}};
constexpr Word<PipelineSchedule> kScheduleWords[] = {{"gpipe", PipelineSchedule::gpipe},
                                                     {"1f1b", PipelineSchedule::one_f_one_b}};

// "--allreduce must be ring, hier or mpi, not 'x'" for a word that names none.
template <typename Enum, std::size_t N>
Enum parse_word(const std::string& text, const Word<Enum> (&words)[N], const char* option) {
  std::string listed;
  for (std::size_t i = 0; i < N; ++i) {
    if (text == words[i].text) return words[i].value;
    listed += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + words[i].text;
  }
  throw InputError(std::string("--") + option + " must be " + listed + ", not '" + text + "'");
}

template <typename Enum, std::size_t N>
const char* word_of(Enum value, const Word<Enum> (&words)[N]) {
  for (const auto& w : words)
    if (w.value == value) return w.text;
  return "?";
}

// The texts that options take before they become values (lists, numbers with words beside them, enums),
// converted once the command line and --config are both read.
struct OptionTexts {
  std::string config, mean, stddev, partition, plan_for, link_within, link_between, replan_every = "epoch",
      shard_state = "auto";
  std::string checkpoint_every = "30min";
  std::string allreduce, lr_schedule, schedule;  // their defaults: the words of TrainOptions' enums
};

po::options_description model_options(TrainOptions& o) {
  po::options_description model("Model");
  std::string names;
  for (const auto& n : model_names()) names += (names.empty() ? "" : " | ") + n;
  names += " | FILE.onnx (a network exported from PyTorch: docs/onnx.md)";
  model.add_options()("model", po::value(&o.model)->default_value(o.model), names.c_str())(
      "num-classes", po::value(&o.num_classes)->default_value(0), "classes (0: the training set's)")(
      "image-size", po::value(&o.image_size)->default_value(0),
      "input height = width (0: the model's own; images are resampled to it)")(
      "dropout", po::value(&o.dropout)->default_value(-1.0f, "model's"),
      "dropout probability (CNN classifiers; transformer attention and MLP)")(
      "patch-size", po::value(&o.patch_size)->default_value(0), "vit: patch size (0: the model's)")(
      "depth", po::value(&o.depth)->default_value(0), "vit: encoder blocks (0: the model's)")(
      "width", po::value(&o.width)->default_value(0), "vit: hidden size (0: the model's)")(
      "heads", po::value(&o.heads)->default_value(0), "vit: attention heads (0: the model's)");
  return model;
}

po::options_description data_options(TrainOptions& o, OptionTexts& t) {
  po::options_description data("Data");
  data.add_options()("train", po::value(&o.train_path),
                     "training set (.h5 from ddl_data import; a shard or the base name)")(
      "val", po::value(&o.val_path), "validation set (.h5)")("val-fraction",
                                                             po::value(&o.val_fraction)->default_value(0.0, "0"),
                                                             "hold out this fraction of --train for validation")(
      "normalize", po::value(&o.normalize)->default_value(o.normalize),
      "scale (pixel/255) | meanstd | imagenet (meanstd with ImageNet's mean and std)")(
      "mean", po::value(&t.mean),
      "per-channel means for meanstd, e.g. 0.485,0.456,0.406 (default: the training set's)")(
      "std", po::value(&t.stddev), "per-channel standard deviations for meanstd")(
      "random-flip", po::bool_switch(&o.random_flip), "augment: random horizontal flips")(
      "random-resized-crop", po::bool_switch(&o.random_resized_crop),
      "augment: torchvision's random-resized-crop (area 8-100%, aspect 3/4-4/3) to the model's input size")(
      "random-crop-padding", po::value(&o.random_crop_padding)->default_value(0),
      "augment: random crops after zero padding by this many pixels")(
      "loader-threads", po::value(&o.loader_threads)->default_value(0),
      "threads a rank decodes JPEG files on (a dataset imported with --store encoded; 0: the cores the compute "
      "threads leave, at least one)")(
      "val-crop-fraction", po::value(&o.val_crop_fraction)->default_value(o.val_crop_fraction, "0.875"),
      "encoded datasets' evaluation: the centre crop, this fraction of the shorter side (torchvision's resize to "
      "size / 0.875, then the centre)")(
      "prefetch", po::value(&o.prefetch_batches)->default_value(o.prefetch_batches),
      "batches the loader prepares ahead of the step (each one batch of the model's input in memory)")(
      "corrupt-images", po::value(&o.corrupt_images)->default_value(o.corrupt_images),
      "refuse | skip: a JPEG that does not decode ends the run naming it, or is skipped (another image of its "
      "batch takes its place; the count is printed each epoch)");
  return data;
}

po::options_description training_options(TrainOptions& o, OptionTexts& t) {
  po::options_description training("Training");
  training.add_options()("epochs", po::value(&o.epochs)->default_value(o.epochs),
                         "epochs to train (in all, counting resumed ones)")(
      "batch-size", po::value(&o.batch_size)->default_value(o.batch_size), "images per step per rank")(
      "global-batch", po::value(&o.global_batch)->default_value(0),
      "images per step over all ranks, instead of --batch-size: each rank that brings its own images takes its "
      "share, so a job continued on fewer ranks (launch/elastic_run.sh) trains the same steps")(
      "steps-per-epoch", po::value(&o.steps_per_epoch)->default_value(0),
      "cap on steps per epoch (0: the whole set; for quick runs)")(
      "optimizer", po::value(&o.optimizer)->default_value(o.optimizer),
      "adam | sgd | lars | lamb (layer-wise adaptive, for large global batches)")(
      "lr", po::value(&o.lr)->default_value(o.lr, "0.001"), "base learning rate")(
      "lr-schedule", po::value(&t.lr_schedule)->default_value(option_word(o.lr_policy)),
      "constant | step | cosine | poly")("warmup-epochs", po::value(&o.warmup_epochs)->default_value(0.0f, "0"),
                                         "linear warm-up length in epochs")(
      "lr-step-epochs", po::value(&o.lr_step_epochs)->default_value(o.lr_step_epochs, "30"),
      "step schedule: epochs between decays")("lr-gamma", po::value(&o.lr_gamma)->default_value(o.lr_gamma, "0.1"),
                                              "step schedule: decay factor")(
      "lr-power", po::value(&o.lr_power)->default_value(o.lr_power, "2"), "poly schedule: the power")(
      "momentum", po::value(&o.momentum)->default_value(o.momentum, "0.9"), "sgd and lars momentum")(
      "lars-trust", po::value(&o.lars_trust)->default_value(o.lars_trust, "0.001"),
      "lars: the trust coefficient (eta) of the layer-wise learning rate")("nesterov", po::bool_switch(&o.nesterov),
                                                                           "sgd: Nesterov momentum")(
      "weight-decay", po::value(&o.weight_decay)->default_value(0.0f, "0"),
      "weight decay: L2, added to the gradient (sgd, adam, lars), or decoupled, added to lamb's update; lars and "
      "lamb leave biases and normalisation parameters undecayed")(
      "adam-beta1", po::value(&o.adam_beta1)->default_value(o.adam_beta1, "0.9"), "adam and lamb beta1")(
      "adam-beta2", po::value(&o.adam_beta2)->default_value(o.adam_beta2, "0.999"), "adam and lamb beta2")(
      "adam-epsilon", po::value(&o.adam_epsilon)->default_value(o.adam_epsilon, "1e-07"),
      "adam and lamb epsilon (Keras 1e-7)")("seed", po::value(&o.seed)->default_value(o.seed),
                                            "seed for initialisation, shuffling, augmentation, dropout")(
      "label-smoothing", po::value(&o.label_smoothing)->default_value(o.label_smoothing, "0"),
      "E in [0, 1): train towards (1 - E) on the label and E spread over all classes (PyTorch's label_smoothing)")(
      "eval-every", po::value(&o.eval_every)->default_value(o.eval_every),
      "validate every N epochs, and after the last")(
      "target-accuracy", po::value(&o.target_accuracy)->default_value(0.0, "0"),
      "end the run at the first validation whose top-1 accuracy reaches this (0: train every epoch)");
  return training;
}

po::options_description system_options(TrainOptions& o, OptionTexts& t) {
  po::options_description system("System");
  system.add_options()("threads", po::value(&o.threads)->default_value(0),
                       "compute threads per rank (0: the node's cores / its ranks)")(
      "cache-images", po::value(&o.cache_images)->default_value(o.cache_images),
      "auto | on | off: read the training images into memory once, before the first epoch, instead of from the "
      "file every step. auto: where they take at most a quarter of this rank's share of the node's memory")(
      "precision", po::value(&o.precision)->default_value(o.precision),
      "f32 | bf16 | auto: bf16 computes convolutions, dense layers and matrix products in bf16 (AVX512-BF16 or "
      "AMX), with bf16 activations between the layers that take them; the loss, the weights, the gradients and "
      "the optimizer stay f32. auto: bf16 where the CPU has those instructions, else f32")(
      "allreduce", po::value(&t.allreduce)->default_value(option_word(o.allreduce_algorithm)),
      "gradient all-reduce: ring | hier (shared memory in a node, ring across) | mpi")(
      "allreduce-wire", po::value(&o.allreduce_wire)->default_value(o.allreduce_wire),
      "f32 | bf16 (ring: half the bytes, sums in f32)")(
      "bucket-mb", po::value(&o.bucket_mb)->default_value(o.bucket_mb, "0"),
      "fuse gradients into buckets of this size, all-reduced during backward (0: after it)")(
      "shard-state", po::value(&t.shard_state)->default_value(t.shard_state),
      "auto | 0 | 1 | 2 | 3: ZeRO's stages. 1: each data-parallel replica keeps the optimizer's state (momentum, "
      "Adam's moments) for 1/replicas of the parameters; the gradients are reduce-scattered and the parameters "
      "all-gathered on the ring, the all-reduce's bytes and sums. 2: the gradients too, each bucket (--bucket-mb, "
      "25 unless given) reduced during backward to the replicas that own it and the rest of its memory released. "
      "3: the parameters too, each layer's gathered from their owners before it runs and released after (half an "
      "all-reduce more a step). auto: 0, unless a --strategy on one node chooses it; under --strategy, 1, 2 or 3 "
      "asks for it wherever a layout has replicas, 0 forbids it")(
      "recompute", po::bool_switch(&o.recompute),
      "keep only the input of each of about sqrt(layers) segments in forward and run the segment's forward again "
      "before its backward: less activation memory for a second forward of all but the last segment, the same "
      "bits. Under --strategy, it asks for it on every stage of a layout without split layers; else the planner "
      "weighs it per stage")(
      "scale-lr", po::bool_switch(&o.scale_lr), "multiply --lr by the number of ranks (use with --warmup-epochs)")(
      "timeout", po::value(&o.timeout)->default_value(o.timeout),
      "seconds a rank may wait for others in one collective or message before it names them and stops the job "
      "(0: no limit; auto: generous at start-up, then 10x the slowest such wait or step so far, at least 30 s). A "
      "fixed limit gives way to 600 s while the job starts (profiling, building the first step) and while "
      "checkpoints are written, where ranks wait on others' legitimately slow work")(
      "check-replicas", po::value(&o.check_replicas)->default_value(o.check_replicas),
      "every this many steps (and at each checkpoint, with the optimizer's state) check that all replicas hold the "
      "same parameters (0: never)")(
      "on-divergence", po::value(&o.on_divergence)->default_value(o.on_divergence),
      "when replicas differ: stop (naming the ranks and the tensor) | resync (copy replica 0's state, log it, go on)");
  return system;
}

po::options_description pipeline_options(TrainOptions& o, OptionTexts& t) {
  po::options_description pipeline("Pipeline (model parallelism; ranks = data-parallel replicas x stages)");
  pipeline.add_options()("pipeline-stages", po::value(&o.pipeline_stages)->default_value(1),
                         "cut the model's layers into this many stages, one rank each")(
      "micro-batches", po::value(&o.micro_batches)->default_value(1),
      "split each step's batch into this many micro-batches (gradients accumulate over them)")(
      "partition", po::value(&t.partition),
      "layers per stage, e.g. 5,4,6 (default: balanced by measured time and memory)")(
      "schedule", po::value(&t.schedule)->default_value(option_word(o.pipeline_schedule)),
      "gpipe (all forwards, then all backwards) | 1f1b (fewer micro-batches in flight)");
  return pipeline;
}

po::options_description split_options(TrainOptions& o) {
  po::options_description split("Split layers (ranks = replicas x stages x tensor-parallel)");
  split.add_options()("tensor-parallel", po::value(&o.tensor_parallel)->default_value(1),
                      "split the chosen layers across groups of this many ranks, each holding a share of their "
                      "parameters: dense layers (below them each rank trains on its own images, which the group "
                      "gathers) or transformer blocks (the group shares one batch)")(
      "tensor-split", po::value(&o.tensor_split)->default_value(o.tensor_split),
      "which layers split: classifier (the dense layers after the last convolution that the group size divides), "
      "blocks (a transformer's blocks: attention heads and MLP features divided, the group sharing one batch) or "
      "layer indices as the model table numbers them, e.g. 9,11");
  return split;
}

po::options_description planner_options(TrainOptions& o, OptionTexts& t) {
  po::options_description planner("Planner (the layout chosen from a profile measured at start)");
  planner.add_options()("strategy", po::value(&o.strategy)->default_value(o.strategy),
                        "manual (the options above) | auto (the fastest predicted layout of replicas, stages, "
                        "split layers, micro-batches, sharded optimizer state and recomputed activations that fits "
                        "the memory limit) | data | pipeline (the best of those kinds); the global batch is "
                        "--batch-size times the ranks")(
      "memory-limit", po::value(&o.memory_limit_gb),
      "GB per rank a plan may use (default: the node's memory shared among its ranks, less 10%); a plan keeps "
      "48 MB or 5% under it, the error of its predicted peaks")(
      "plan-only", po::bool_switch(&o.plan_only), "print the plan and stop")(
      "plan-for", po::value(&t.plan_for),
      "RANKS[,RANKS_PER_NODE]: plan a larger cluster from the profile measured here (or --load-profile), print it "
      "and stop (ranks per node: as this job's by default; memory per rank: this node's shared among them, or "
      "--memory-limit)")(
      "save-profile", po::value(&o.save_profile), "write the measured profile to this file (rank 0)")(
      "load-profile", po::value(&o.load_profile),
      "plan from this profile file instead of measuring (e.g. a saved one with another network's link figures)")(
      "link-within", po::value(&t.link_within),
      "LATENCY_US,GB_PER_S of an all-reduce link within a node, where it cannot be measured (default 5,5)")(
      "link-between", po::value(&t.link_between),
      "LATENCY_US,GB_PER_S between nodes, where it cannot be measured (default 50,1.25: 10 Gbit/s Ethernet)")(
      "replan-every", po::value(&t.replan_every)->default_value(t.replan_every),
      "STEPS | epoch | never: how often a planned run measures its layers and links again and moves to another "
      "layout when one is predicted at least 10% faster");
  return planner;
}

po::options_description output_options(TrainOptions& o, OptionTexts& t) {
  po::options_description output("Output");
  output.add_options()("checkpoint-dir", po::value(&o.checkpoint_dir), "write last.h5 and best.h5 here each epoch")(
      "checkpoint-every", po::value(&t.checkpoint_every)->default_value(t.checkpoint_every),
      "also write last.h5 within an epoch, this often: a time (30min, 90s, 2h), a step count (500steps), or "
      "epoch (only at epochs' ends); --resume continues from the step after it")(
      "resume", po::value(&o.resume), "continue from this checkpoint, or 'auto' for <checkpoint-dir>/last.h5")(
      "init", po::value(&o.init),
      "start from the weights of this checkpoint (ddl_train's, or launch/import_torch.py's), not its optimizer "
      "state or epochs; a classifier for another class count starts afresh. --resume wins when it finds one")(
      "metrics", po::value(&o.metrics_path), "per-epoch figures to this file (.csv, or .jsonl for JSON lines)")(
      "mlperf-log", po::value(&o.mlperf_log),
      "write MLPerf Training's :::MLLOG lines to this file: the submission's keys, run and epoch marks, each "
      "evaluation's accuracy and the run's stop (docs/training.md)")(
      "tensorboard", po::value(&o.tensorboard_dir),
      "write TensorBoard event files to this folder: the train loss and learning rate every --tensorboard-every "
      "steps, each epoch's figures (docs/faults-and-observability.md lists the tags)")(
      "tensorboard-every", po::value(&o.tensorboard_every)->default_value(o.tensorboard_every),
      "STEPS between two per-step points in TensorBoard")(
      "timeline", po::value(&o.timeline_path),
      "write every rank's forward, backward, communication and data-wait spans to this Chrome trace (.json)")(
      "progress", po::value(&o.progress)->default_value(o.progress),
      "progress bar: auto (on a terminal, not under mpirun) | always | never")(
      "profile", po::bool_switch(&o.profile), "print per-layer forward/backward times");
  return output;
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

// The lists and the words beside numbers, and what --strategy takes from the layout's options.
void convert_texts(TrainOptions& o, const OptionTexts& t, const po::variables_map& vm) {
  auto given = [&](const char* option) { return vm.count(option) && !vm[option].defaulted(); };
  if (o.strategy != "manual") {
    require(!given("partition") && !given("tensor-split"),
            "--strategy " + o.strategy + " chooses the cut and the split layers: give --partition and --tensor-split "
            "with --strategy manual");
    if (given("pipeline-stages")) o.fixed_stages = o.pipeline_stages;
    if (given("tensor-parallel")) o.fixed_tensor = o.tensor_parallel;
    if (given("micro-batches")) o.fixed_micro_batches = o.micro_batches;
    // data and pipeline name the kind of layout: an axis given against it would go unused without a word.
    require(o.strategy != "data" || (o.fixed_stages <= 1 && o.fixed_tensor <= 1),
            "--strategy data trains whole replicas: --pipeline-stages and --tensor-parallel above 1 go with "
            "--strategy auto or manual");
    require(o.strategy != "pipeline" || (o.fixed_stages != 1 && o.fixed_tensor <= 1),
            "--strategy pipeline cuts whole layers into 2 stages or more: --pipeline-stages 1 and "
            "--tensor-parallel above 1 go with --strategy auto or manual");
  }
  require(!given("global-batch") || (!given("batch-size") && !o.scale_lr),
          "--global-batch sets the batch of every rank: give it without --batch-size and --scale-lr");
  require(!given("global-batch") || o.global_batch >= 1, "--global-batch must be at least 1");
  if (!t.mean.empty()) o.mean = parse_floats(t.mean, "mean");
  if (!t.stddev.empty()) o.stddev = parse_floats(t.stddev, "std");
  for (float count : parse_floats(t.partition, "partition")) {
    // Compared before the cast: a float beyond size_t's range (1e30, inf) does not convert (undefined).
    require(count >= 1 && count <= 1e6f && count == std::floor(count),
            "--partition takes whole layer counts of at least 1, e.g. 5,4,6");
    o.partition.push_back(static_cast<std::size_t>(count));
  }

  if (!t.plan_for.empty()) {
    const auto counts = parse_floats(t.plan_for, "plan-for");
    require((counts.size() == 1 || counts.size() == 2) && counts[0] >= 1 && counts[0] <= 1e6f &&
                counts[0] == std::floor(counts[0]) && (counts.size() == 1 || (counts[1] >= 1 && counts[1] <= counts[0])),
            "--plan-for takes RANKS or RANKS,RANKS_PER_NODE, e.g. 64,16");
    o.plan_for_ranks = static_cast<int>(counts[0]);
    o.plan_for_per_node = counts.size() == 2 ? static_cast<int>(counts[1]) : 0;  // 0: as this job's nodes
    o.plan_only = true;
  }
  for (auto [text, link, name] : {std::tuple{&t.link_within, &o.link_within, "link-within"},
                                  std::tuple{&t.link_between, &o.link_between, "link-between"}}) {
    if (text->empty()) continue;
    const auto v = parse_floats(*text, name);
    require(v.size() == 2 && v[0] >= 0 && v[1] > 0,
            std::string("--") + name + " takes LATENCY_US,GB_PER_S, e.g. 50,1.25");
    *link = {v[0] * 1e-6, v[1] * 1e9};
  }
  require(o.strategy != "manual" || !given("replan-every"),
          "--replan-every goes with --strategy auto, data or pipeline (a manual layout is never re-planned)");
  if (t.replan_every == "never") {
    o.replan_every = TrainOptions::kNeverReplan;
  } else if (t.replan_every != "epoch") {
    const auto steps = parse_floats(t.replan_every, "replan-every");
    require(steps.size() == 1 && steps[0] >= 1 && steps[0] <= 1e9f && steps[0] == std::floor(steps[0]),
            "--replan-every takes a step count of at least 1, epoch or never, not '" + t.replan_every + "'");
    o.replan_every = static_cast<int>(steps[0]);
  }
  parse_checkpoint_every(t.checkpoint_every, o);
}

// The values' ranges and the words they may be; the enums' words parsed.
void check_training(TrainOptions& o, const OptionTexts& t) {
  require(o.strategy == "manual" || o.strategy == "auto" || o.strategy == "data" || o.strategy == "pipeline",
          "--strategy must be manual, auto, data or pipeline, not '" + o.strategy + "'");
  require(o.memory_limit_gb >= 0, "--memory-limit must be >= 0");
  require(o.strategy != "manual" || (!o.plan_only && o.load_profile.empty() && o.save_profile.empty()),
          "--plan-only, --plan-for, --load-profile and --save-profile go with --strategy auto, data or pipeline");
  require(!o.train_path.empty(), "--train is required (an .h5 dataset from 'ddl_data import')");
  require(o.epochs >= 1, "--epochs must be at least 1");
  require(o.batch_size >= 1, "--batch-size must be at least 1");
  require(o.steps_per_epoch >= 0, "--steps-per-epoch must be >= 0");
  require(o.tensorboard_every >= 1, "--tensorboard-every must be at least 1");
  require(o.loader_threads >= 0 && o.loader_threads <= 1024, "--loader-threads must be in [0, 1024]");
  require(o.val_crop_fraction > 0 && o.val_crop_fraction <= 1, "--val-crop-fraction must be in (0, 1]");
  require(o.corrupt_images == "refuse" || o.corrupt_images == "skip", "--corrupt-images must be refuse or skip");
  require(o.prefetch_batches >= 1 && o.prefetch_batches <= 64, "--prefetch must be in [1, 64]");
  require(o.label_smoothing >= 0 && o.label_smoothing < 1, "--label-smoothing must be in [0, 1)");
  require(o.eval_every >= 1, "--eval-every must be at least 1");
  require(o.target_accuracy >= 0 && o.target_accuracy <= 1, "--target-accuracy must be in [0, 1]");
  // NaN fails every comparison, so each check below is written to pass only real values.
  require(o.lr > 0 && std::isfinite(o.lr), "--lr must be a positive number");
  require(o.momentum >= 0 && o.momentum < 1, "--momentum must be in [0, 1)");
  require(o.weight_decay >= 0 && std::isfinite(o.weight_decay), "--weight-decay must be a number >= 0");
  require(!o.nesterov || o.optimizer == "sgd", "--nesterov goes with --optimizer sgd");
  require(o.lr_gamma > 0 && std::isfinite(o.lr_gamma), "--lr-gamma must be a positive number");
  require(o.lr_step_epochs > 0 && std::isfinite(o.lr_step_epochs), "--lr-step-epochs must be a positive number");
  require(o.warmup_epochs >= 0 && o.warmup_epochs <= static_cast<float>(o.epochs),
          "--warmup-epochs must be between 0 and --epochs (" + std::to_string(o.epochs) +
              "): a longer warm-up never reaches --lr");
  require(o.val_fraction >= 0 && o.val_fraction < 1, "--val-fraction must be in [0, 1)");
  require(o.val_path.empty() || o.val_fraction == 0, "give --val or --val-fraction, not both");
  require(o.optimizer == "adam" || o.optimizer == "sgd" || o.layerwise_optimizer(),
          "--optimizer must be adam, sgd, lars or lamb");
  // Their trust ratio is the norm of a whole layer's weights, which a split layer spreads over ranks.
  require(!o.layerwise_optimizer() || o.tensor_parallel == 1,
          "--optimizer " + o.optimizer + " needs whole layers on each rank: it goes without --tensor-parallel");
  require(o.lr_power > 0 && std::isfinite(o.lr_power), "--lr-power must be a positive number");
  require(t.shard_state == "auto" || t.shard_state == "0" || t.shard_state == "1" || t.shard_state == "2" ||
              t.shard_state == "3",
          "--shard-state must be auto, 0, 1, 2 or 3, not '" + t.shard_state + "'");
  o.shard_state = t.shard_state == "auto" ? TrainOptions::kShardStateAuto : std::stoi(t.shard_state);
  if (o.shard_state > 0) require(o.shard_state_refusal().empty(), o.shard_state_refusal());
  if (o.recompute) {
    // A split layer's forward talks to its group: run again, it would repeat that traffic, which is untested.
    require(o.tensor_parallel == 1, "--recompute goes without --tensor-parallel");
  }
  require(o.normalize == "scale" || o.normalize == "meanstd" || o.normalize == "imagenet",
          "--normalize must be scale, meanstd or imagenet");
  require(o.image_size >= 0 && o.patch_size >= 0 && o.depth >= 0 && o.width >= 0 && o.heads >= 0,
          "--image-size, --patch-size, --depth, --width and --heads must be >= 0");
  require(o.dropout < 1.0f, "--dropout must be below 1");
  require(o.progress == "auto" || o.progress == "always" || o.progress == "never",
          "--progress must be auto, always or never");
  require(o.threads >= 0 && o.threads <= 1024, "--threads must be between 0 and 1024");
  o.allreduce_algorithm = parse_word(t.allreduce, kAllreduceWords, "allreduce");
  o.lr_policy = parse_word(t.lr_schedule, kLrScheduleWords, "lr-schedule");
}

void check_system_and_layout(TrainOptions& o, const OptionTexts& t) {
  require(o.allreduce_wire == "f32" || o.allreduce_wire == "bf16", "--allreduce-wire must be f32 or bf16");
  require(o.cache_images == "auto" || o.cache_images == "on" || o.cache_images == "off",
          "--cache-images must be auto, on or off");
  require(o.precision == "f32" || o.precision == "bf16" || o.precision == "auto",
          "--precision must be f32, bf16 or auto");
  require(o.allreduce_wire == "f32" || o.allreduce_algorithm == AllreduceAlgorithm::ring, "--allreduce-wire bf16 needs --allreduce ring");
  require(o.bucket_mb >= 0, "--bucket-mb must be >= 0");
  if (o.timeout != "auto") {
    const auto seconds = parse_floats(o.timeout, "timeout");
    require(seconds.size() == 1 && seconds[0] >= 0, "--timeout must be auto or a number of seconds >= 0");
    o.timeout_seconds = seconds[0];
  }
  require(o.normalize == "meanstd" || (t.mean.empty() && t.stddev.empty()),
          "--mean and --std apply to --normalize meanstd, not " + o.normalize);
  require(o.check_replicas >= 0, "--check-replicas must be >= 0");
  require(o.on_divergence == "stop" || o.on_divergence == "resync", "--on-divergence must be stop or resync");
  require(o.resume != "auto" || !o.checkpoint_dir.empty(), "--resume auto needs --checkpoint-dir");
  require(o.num_classes == 0 || o.num_classes >= 2, "--num-classes must be at least 2");
  require(o.pipeline_stages >= 1, "--pipeline-stages must be at least 1");
  require(o.tensor_parallel >= 1, "--tensor-parallel must be at least 1");
  require(o.micro_batches >= 1, "--micro-batches must be at least 1");
  // With --global-batch, the layout checks each rank's share (layout_choice.cpp).
  require(o.global_batch > 0 || o.batch_size % o.micro_batches == 0, "--batch-size " + std::to_string(o.batch_size) +
                                                   " does not split into " + std::to_string(o.micro_batches) +
                                                   " micro-batches");
  require(o.partition.empty() || o.partition.size() == static_cast<std::size_t>(o.pipeline_stages),
          "--partition gives " + std::to_string(o.partition.size()) + " stages, --pipeline-stages is " +
              std::to_string(o.pipeline_stages));
  o.pipeline_schedule = parse_word(t.schedule, kScheduleWords, "schedule");
}

}  // namespace

std::string TrainOptions::shard_state_refusal() const {
  if (bucket_mb != 0 && shard_state == 1)
    return "--shard-state 1 reduce-scatters the gradients after backward: it goes without --bucket-mb (2 and 3 take it)";
  // The all-gather carries parameters, which a bf16 wire would round.
  if (allreduce_wire != "f32") return "--shard-state all-gathers the parameters in f32: it goes without --allreduce-wire bf16";
  return "";
}

std::string TrainOptions::describe() const {
  std::ostringstream s;
  s << "model = " << model << "\nnum-classes = " << num_classes << "\nimage-size = " << image_size
    << "\ndropout = " << dropout << "\npatch-size = " << patch_size << "\ndepth = " << depth << "\nwidth = " << width
    << "\nheads = " << heads << "\nrandom-resized-crop = " << random_resized_crop
    << "\nval-crop-fraction = " << val_crop_fraction << "\ntrain = " << train_path << "\nval = " << val_path
    << "\nval-fraction = " << val_fraction << "\nnormalize = " << normalize << "\nrandom-flip = " << random_flip
    << "\nrandom-crop-padding = " << random_crop_padding << "\nepochs = " << epochs << "\nbatch-size = " << batch_size
    << "\nsteps-per-epoch = " << steps_per_epoch << "\noptimizer = " << optimizer << "\nlr = " << lr
    << "\nlr-schedule = " << option_word(lr_policy) << "\nwarmup-epochs = " << warmup_epochs
    << "\nshard-state = " << (shard_state == kShardStateAuto ? "auto" : std::to_string(shard_state))
    << "\nrecompute = " << recompute << "\nlr-step-epochs = " << lr_step_epochs << "\nlr-gamma = " << lr_gamma
    << "\nlr-power = " << lr_power << "\nmomentum = " << momentum << "\nlars-trust = " << lars_trust
    << "\nnesterov = " << nesterov << "\nweight-decay = " << weight_decay << "\nadam-beta1 = " << adam_beta1
    << "\nadam-beta2 = " << adam_beta2 << "\nadam-epsilon = " << adam_epsilon << "\nseed = " << seed
    << "\nlabel-smoothing = " << label_smoothing << "\nallreduce = " << option_word(allreduce_algorithm)
    << "\nallreduce-wire = " << allreduce_wire << "\nbucket-mb = " << bucket_mb << "\nscale-lr = " << scale_lr
    << "\npipeline-stages = " << pipeline_stages << "\nmicro-batches = " << micro_batches
    << "\npartition = " << to_string(partition) << "\nschedule = " << option_word(pipeline_schedule)
    << "\ninit = " << init << "\nprecision = " << precision << "\ntensor-parallel = " << tensor_parallel
    << "\ntensor-split = " << tensor_split << "\nstrategy = " << strategy << "\n";
  for (float m : mean) s << "mean += " << m << "\n";
  for (float d : stddev) s << "std += " << d << "\n";
  return s.str();
}

std::string TrainOptions::describe(const Layout& layout) const {
  TrainOptions planned = *this;
  planned.batch_size = layout.batch;  // what --global-batch gave each rank, too
  if (strategy == "manual") return planned.describe();
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

std::optional<TrainOptions> parse_train_options(int argc, char** argv) {
  TrainOptions o;
  OptionTexts t;
  po::options_description general("General");
  general.add_options()("help,h", "print this help")("config", po::value(&t.config),
                                                     "read options from this file (key = value lines)");
  po::options_description all(
      "ddl_train: train a model on an HDF5 image dataset (run under mpirun for data parallelism)");
  all.add(general)
      .add(model_options(o))
      .add(data_options(o, t))
      .add(training_options(o, t))
      .add(system_options(o, t))
      .add(pipeline_options(o, t))
      .add(split_options(o))
      .add(planner_options(o, t))
      .add(output_options(o, t));
  po::variables_map vm;
  if (!read_options(argc, argv, all, vm)) return std::nullopt;
  convert_texts(o, t, vm);
  check_training(o, t);
  check_system_and_layout(o, t);
  return o;
}

}  // namespace ddl
