#include "launch/train/job.hpp"

#include <malloc.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>

#include "core/checksum.hpp"
#include "core/cpu_bf16.hpp"
#include "core/data/hdf5.hpp"
#include "core/data/sampler.hpp"
#include "core/error.hpp"
#include "core/thread_affinity.hpp"
#include "launch/strategy.hpp"
#include "launch/thread_count.hpp"
#include "launch/thread_placement.hpp"
#include "launch/train/on_every_rank.hpp"
#include "models/onnx/graph_model.hpp"

namespace ddl {
namespace {

// "3 nodes: host1 x2, host2 x2, host3 x2" on rank 0 when the job spans several hosts (empty otherwise), so
// that a launch across nodes can be checked from its output.
std::string describe_nodes(const Communicator& world) {
  char name[256] = "?";
  gethostname(name, sizeof name - 1);
  const auto names = world.gather(name, 0);
  std::vector<std::pair<std::string, int>> hosts;
  for (const auto& n : names) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == n; });
    if (it == hosts.end())
      hosts.emplace_back(n, 1);
    else
      ++it->second;
  }
  if (hosts.size() < 2) return "";
  std::string text = std::to_string(hosts.size()) + " nodes:";
  for (std::size_t i = 0; i < hosts.size(); ++i)
    text += (i ? ", " : " ") + hosts[i].first + " x" + std::to_string(hosts[i].second);
  return text;
}

std::vector<std::size_t> every_index(std::size_t n) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

void check_precision_and_paths(const TrainOptions& o) {
  if (o.precision == Precision::bf16 && !cpu_computes_bf16())
    throw InputError(
        "--precision bf16: this CPU has neither AVX512-BF16 nor AMX (oneDNN would emulate bf16, "
        "slower than f32): train with --precision f32");
  for (const auto& [option, path] : {std::pair{"--train", o.train_path}, std::pair{"--val", o.val_path}})
    if (!path.empty() && std::filesystem::is_directory(path))
      throw InputError(std::string(option) + " " + path +
                       " is a folder: import its images first (ddl_data import "
                       "--from " +
                       path + " --output data.h5) and give the .h5 file");
}

ModelConfig model_config(const TrainOptions& o, const ImageDataset& train) {
  const ModelConfig config{.num_classes = o.num_classes > 0 ? o.num_classes : static_cast<int>(train.num_classes()),
                           .seed = o.seed,
                           .image_size = o.image_size,
                           .dropout = o.dropout,
                           .patch_size = o.patch_size,
                           .depth = o.depth,
                           .width = o.width,
                           .heads = o.heads};
  if (static_cast<std::size_t>(config.num_classes) < train.num_classes())
    throw InputError(o.train_path + " has " + std::to_string(train.num_classes()) + " classes but --num-classes is " +
                     std::to_string(config.num_classes));
  return config;
}

void check_model_input(const TrainOptions& o, Model& whole, const ImageDataset& train) {
  const dims_t in = whole.input_shape();
  if (o.image_size > 0 && in[1] != o.image_size)
    throw InputError("model " + o.model + " takes " + std::to_string(in[1]) + "x" + std::to_string(in[2]) +
                     " images; --image-size does not apply to it");
  if (train.channels() != in[0])
    throw InputError("model " + o.model + " takes " + std::to_string(in[0]) + "-channel images, " + o.train_path +
                     " holds " + image_shape(train));
}

// Images of another size than the model's input are resampled by the loader.
Preprocessing preprocessing(const TrainOptions& o, const Model& whole, const ImageDataset& train) {
  Preprocessing prep;
  const dims_t in = whole.input_shape();
  prep.out_height = static_cast<int>(in[1]);
  prep.out_width = static_cast<int>(in[2]);
  prep.random_flip = o.random_flip;
  prep.random_crop_padding = o.random_crop_padding;
  prep.random_resized_crop = o.random_resized_crop;
  prep.val_crop_fraction = o.val_crop_fraction;
  prep.skip_corrupt = o.corrupt_images == CorruptImages::skip;
  if (o.normalize == Normalization::imagenet) {
    prep.normalize_mean_std = true;
    prep.mean = kImageNetMean;
    prep.stddev = kImageNetStd;
  } else if (o.normalize == Normalization::meanstd) {
    prep.normalize_mean_std = true;
    prep.mean = o.mean.empty() ? std::vector<float>(train.channel_mean().begin(), train.channel_mean().end()) : o.mean;
    prep.stddev =
        o.stddev.empty() ? std::vector<float>(train.channel_std().begin(), train.channel_std().end()) : o.stddev;
  }
  return prep;
}

// --cache-images: the bytes of training images to keep in memory, 0 for none. Every first-stage rank holds
// every training image, since each epoch deals them out to the replicas anew (the other stages read none).
// auto: where the whole file's images take at most a quarter of a rank's share of the node's memory, the
// smallest node's, so that every rank decides alike. Collective over `world`.
double images_to_keep_in_memory(const TrainOptions& o, const Communicator& world, double bytes, std::string& note) {
  if (o.cache_images == CacheImages::off) return 0;
  if (bytes < 0) {
    if (o.cache_images == CacheImages::on)
      throw InputError("--cache-images on: " + o.train_path + " holds JPEG files, decoded each step");
    return 0;
  }
  const double share = rank_memory_limit(o, world.split_shared().size(), world);
  if (o.cache_images == CacheImages::automatic && !(bytes <= share / 4)) {
    note = "training images read from the file every step (" + std::to_string(static_cast<long long>(bytes / 1e6)) +
           " MB do not fit in a quarter of a rank's memory share; --cache-images on to keep them in memory)";
    return 0;
  }
  return bytes;
}

// Validation: a separate file, or a seeded fraction held out of the training file.
void choose_subsets(JobSettings& job, const ImageDataset& train) {
  const TrainOptions& o = job.options;
  job.train_subset = every_index(train.size());
  if (!o.val_path.empty()) {
    const ImageDataset val(o.val_path);
    if (val.height() != train.height() || val.width() != train.width() || val.channels() != train.channels() ||
        val.encoded() != train.encoded())
      throw InputError(o.val_path + ": images are " + image_shape(val) + ", the training set's " + image_shape(train));
    if (val.class_names() != train.class_names())
      throw InputError(o.val_path + ": class names differ from the training set's");
    job.val_subset = every_index(val.size());
  } else if (o.val_fraction > 0) {
    const auto order = epoch_permutation(train.size(), o.seed ^ 0x7a11d, 0);
    const auto n_val = static_cast<std::size_t>(o.val_fraction * static_cast<double>(train.size()));
    if (n_val == 0) throw InputError("--val-fraction leaves no validation images");
    job.val_subset.assign(order.begin(), order.begin() + n_val);
    job.train_subset.assign(order.begin() + n_val, order.end());
  }
  if (job.val_subset.empty() && o.target_accuracy > 0)
    throw InputError("--target-accuracy needs validation images (--val or --val-fraction)");
}

// An imported graph's model: checkpoints keep the graph (without the weights they hold themselves) and
// its names; the run says where its weights start from.
void keep_graph(Job& job, const TrainOptions& o, GraphModel graph) {
  job.whole = std::move(graph.model);
  job.whole->set_starting_values(nullptr);  // the sessions' models start from the values; this one chooses layouts
  std::set<std::string> weights;
  for (const auto& [ddl_name, graph_name] : graph.onnx_names) {
    job.state.graph_names.push_back(ddl_name + "=" + graph_name);
    weights.insert(graph_name);
  }
  const std::string stripped = onnx::strip_weights(job.config.graph->bytes, weights);
  job.state.graph.assign(stripped.begin(), stripped.end());
  job.init_note = "initialised from the graph's initializers (" + o.model + ")";
  if (!graph.fresh_classifier.empty())
    job.init_note += "; " + graph.fresh_classifier + " start afresh (the graph's classifier is for another class count)";
}

// A loader that decodes JPEG files gets cores of its own where the rank has them: ranks of a node that see
// the same CPUs (no binding, or one cgroup for all) split them.
void place_threads_apart(JobSettings& s, const Communicator& node) {
  const std::vector<int> cpus = allowed_cpus();
  const std::uint64_t mine = Checksum().add(std::span<const int>(cpus)).value();
  const auto all = node.allgather(mine);
  const auto sharing = static_cast<int>(std::count(all.begin(), all.end(), mine));
  int index = 0;
  for (int r = 0; r < node.rank(); ++r) index += all[static_cast<std::size_t>(r)] == mine;
  ThreadPlacement placement = place_threads(cpus, index, sharing, s.threads, s.loader_threads);
  pin_compute_threads(placement.compute);
  s.prep.loader_cpus = std::move(placement.loader);
  s.placement_note = std::move(placement.note);
}

// The model and the data, read once on every rank alike: the job's model definition and training state
// filled in, the settings that follow from them returned in `s`. Returns the training images' bytes (-1 for
// an encoded set, read from its file each step).
double set_up_model_and_data(Job& job, JobSettings& s) {
  const TrainOptions& o = s.options;
  double image_bytes = 0;
  on_every_rank(job.world, "setting up", [&] {
    check_precision_and_paths(o);
    if (o.precision == Precision::bf16) s.compute_type = dnnl::memory::data_type::bf16;
    const ImageDataset train(o.train_path);
    job.config = model_config(o, train);
    if (is_graph_file(o.model)) {
      job.config.graph = read_graph_file(o.model);
      keep_graph(job, o, define_graph_model(o.model, job.config));
    } else {
      job.whole = define_model(o.model, job.config);
    }
    check_model_input(o, *job.whole, train);
    s.prep = preprocessing(o, *job.whole, train);
    s.prep.decode_threads = s.loader_threads;
    s.decodes_images = train.encoded();
    if (!o.plan_only) choose_subsets(s, train);  // a plan reads no validation set
    image_bytes = train.encoded() ? -1.0 : static_cast<double>(train.size()) * static_cast<double>(train.image_bytes());
    job.state.model_name = job.whole->name();
    job.state.seed = o.seed;
    job.state.class_names = train.class_names();
    job.state.input_mean.assign(s.prep.mean.begin(), s.prep.mean.end());
    job.state.input_std.assign(s.prep.stddev.begin(), s.prep.stddev.end());
  });
  return image_bytes;
}

JobSettings settle(TrainOptions given, Job& job) {
  const Communicator& world = job.world;
  JobSettings s;
  s.options = std::move(given);
  TrainOptions& o = s.options;
  // A strategy measures its profile at a rank's share of the global batch.
  if (o.global_batch > 0) o.batch_size = std::max(1, o.global_batch / world.size());
  const Communicator node = world.split_shared();
  const int on_this_node = node.size();
  s.threads = o.threads > 0 ? o.threads : default_threads(on_this_node);
  s.loader_threads =
      o.loader_threads > 0 ? o.loader_threads : std::max(1, cores_left_to_a_rank(on_this_node, s.threads));
  std::vector<double> largest_node{static_cast<double>(on_this_node)};
  world.allreduce_max(largest_node);
  s.ranks_per_node = static_cast<int>(largest_node[0]);
  omp_set_num_threads(s.threads);
  s.nodes = describe_nodes(world);
  const double image_bytes = set_up_model_and_data(job, s);
  if (o.precision == Precision::automatic) {
    // bf16 only where every rank's CPU computes it: replicas must compute alike.
    double without_bf16[1] = {cpu_computes_bf16() ? 0.0 : 1.0};
    world.allreduce_sum(without_bf16);
    if (without_bf16[0] == 0.0) s.compute_type = dnnl::memory::data_type::bf16;
  }
  s.cache_bytes = images_to_keep_in_memory(o, world, image_bytes, job.cache_note);
  if (s.decodes_images) place_threads_apart(s, node);
  return s;
}

}  // namespace

std::string image_shape(const ImageDataset& ds) {
  if (ds.encoded()) return "JPEG files of any size";
  return std::to_string(ds.height()) + "x" + std::to_string(ds.width()) + "x" + std::to_string(ds.channels());
}

Job::Job(TrainOptions given, const Communicator& ranks)
    : world(ranks), settings(settle(given, *this)), given_options(options_given(given)) {}

void Job::forget_graph_weights() {
  if (!config.graph || !config.graph->weights_elsewhere.empty()) return;
  config.graph =
      graph_without_weights(std::string(state.graph.begin(), state.graph.end()), state.graph_names, options.model);
  // The weights' copies freed while the models were built lie in malloc's heap in pieces, which it keeps;
  // a step's buffers are large blocks that malloc maps afresh, so the pieces would stay resident for the run.
  malloc_trim(0);
}

void Job::prepare_outputs() {
  const TrainOptions& o = options;
  if (world.rank() == 0 && !o.metrics_path.empty()) {
    const auto folder = std::filesystem::path(o.metrics_path).parent_path();
    if (!folder.empty() && !std::filesystem::is_directory(folder))
      throw InputError("--metrics " + o.metrics_path + ": there is no folder " + folder.string());
  }
  if (world.rank() == 0 && !o.mlperf_log.empty()) {
    mlperf.emplace(o.mlperf_log);
    mlperf->start("init_start", "", began);
  }
  if (world.rank() == 0 && !o.tensorboard_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.tensorboard_dir, ec);
    if (ec) throw InputError("--tensorboard " + o.tensorboard_dir + ": " + ec.message());
  }
  if (!o.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec) throw InputError("--checkpoint-dir " + o.checkpoint_dir + ": " + ec.message());
    if (world.rank() == 0) checkpoint_lock = std::make_unique<DirectoryLock>(o.checkpoint_dir);
  }
}

}  // namespace ddl
