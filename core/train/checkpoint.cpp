#include "core/train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/checksum.hpp"
#include "core/data/hdf5.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

constexpr const char* kMagic = "ddl-checkpoint";
// 2: every dataset checksummed (HDF5's Fletcher-32 filter), the file's structure too (the 1.10 format's
// superblock, object headers and chunk indexes carry checksums, and every string is of fixed length, kept
// in an object header rather than in the global heap, which has none), and the header's values in
// header_checksum. 3: the class names and the input normalisation of the training run. Versions 1 (no
// checksums) and 2 are still read.
constexpr int kVersion = 3;
constexpr hsize_t kChunkValues = hsize_t{1} << 20;  // 4 MB of floats: Fletcher-32 checks each chunk on reading

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open " + path + " to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error("cannot sync " + path + " to disk: " + std::strerror(err));
}

h5::Handle create_group(const h5::Handle& loc, const std::string& name, const std::string& context) {
  return h5::Handle(h5::check_id(H5Gcreate2(loc.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                 "cannot create group " + name, context));
}

h5::Handle open_group(const h5::Handle& loc, const std::string& name, const std::string& context) {
  if (!h5::exists(loc, name)) throw InputError(context + ": group '" + name + "' is missing");
  const hid_t id = H5Gopen2(loc.get(), name.c_str(), H5P_DEFAULT);
  if (id < 0) throw InputError(context + ": '" + name + "' is not a group (corrupt checkpoint?)");
  return h5::Handle(id);
}

// A file whose structure HDF5 checksums: the 1.10 format's superblock, object headers (attributes
// included) and chunk indexes carry checksums, which the 1.6-compatible default format has not. (The
// 1.8 format is not enough: its chunk index, a version 1 B-tree, has none, and a flipped bit in a chunk's
// address can point it at another dataset's chunk, whose own checksum then matches.) HDF5 1.10 (Debian
// 12) and 1.14 (Debian 13) read it.
h5::Handle create_checksummed_file(const std::string& path) {
  h5::Handle access(h5::check_id(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", path));
  h5::check(H5Pset_libver_bounds(access.get(), H5F_LIBVER_V110, H5F_LIBVER_V110), "H5Pset_libver_bounds", path);
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
  if (id < 0) throw InputError(path + ": cannot create file (directory missing or not writable?)");
  return h5::Handle(id);
}

// A 1-D dataset of `size` values whose every chunk HDF5 checks with Fletcher-32 when it is read.
template <typename T>
void create_checksummed_vector(const h5::Handle& loc, const std::string& name, std::size_t size) {
  const hsize_t n = size;
  h5::Handle space(h5::check_id(H5Screate_simple(1, &n, nullptr), "H5Screate_simple", name));
  h5::Handle layout(h5::check_id(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", name));
  if (n > 0) {  // an empty dataset cannot be chunked, and holds nothing to check
    const hsize_t chunk = std::min(n, kChunkValues);
    h5::check(H5Pset_chunk(layout.get(), 1, &chunk), "H5Pset_chunk", name);
    h5::check(H5Pset_fletcher32(layout.get()), "H5Pset_fletcher32", name);
  }
  h5::Handle ds(h5::check_id(
      H5Dcreate2(loc.get(), name.c_str(), h5::native_type<T>(), space.get(), H5P_DEFAULT, layout.get(), H5P_DEFAULT),
      "cannot create dataset", name));
}

template <typename T>
void write_checksummed(const h5::Handle& loc, const std::string& name, std::span<const T> values) {
  create_checksummed_vector<T>(loc, name, values.size());
  h5::write_slice<T>(loc, name, 0, values);
}

void write_states(const h5::Handle& group, const std::vector<StateView>& states) {
  for (const auto& s : states) {
    if (!s.floats.empty())
      write_checksummed<float>(group, s.name, s.floats);
    else
      write_checksummed<std::uint64_t>(group, s.name, s.words);
  }
}

// The header's values, which live partly where HDF5 keeps no checksum (variable-length strings).
// `version`: the file's format; version 3 added the class names and the normalisation.
std::uint64_t header_checksum(const TrainingState& state, const std::vector<std::string>& param_names, int version) {
  Checksum c;
  c.add(state.model_name).add(state.epochs_done).add(state.steps_done).add(state.seed);
  c.add(&state.best_accuracy, sizeof state.best_accuracy).add(state.configuration);
  for (const auto& name : param_names) c.add(name);
  if (version >= 3) {
    c.add(state.class_names.size());
    for (const auto& name : state.class_names) c.add(name);
    for (const auto& values : {state.input_mean, state.input_std})
      c.add(values.size()).add(values.data(), values.size() * sizeof(double));
  }
  // An imported graph's names; the graph itself is a checksummed dataset.
  if (!state.graph_names.empty()) {
    c.add(state.graph_names.size());
    for (const auto& name : state.graph_names) c.add(name);
  }
  return c.value();
}

// Reads one tensor, naming it and the file when HDF5 cannot: a chunk whose checksum does not match, or
// a file cut short.
template <typename Read>
void read_tensor(const std::string& path, const std::string& tensor, Read read) {
  try {
    read();
  } catch (const Error&) {  // HDF5's own message says only that a read failed
    throw InputError(path + ": tensor '" + tensor + "' is damaged (its checksum does not match, or the file is cut short)");
  }
}

void read_states(const h5::Handle& group, const std::string& group_name, const std::vector<StateView>& states,
                 const std::string& path) {
  for (const auto& s : states)
    read_tensor(path, group_name + "/" + s.name, [&] {
      if (!s.floats.empty())
        h5::read_dataset_into<float>(group, s.name, s.floats, path);
      else
        h5::read_dataset_into<std::uint64_t>(group, s.name, s.words, path);
    });
}

}  // namespace

namespace {

std::string temporary(const std::string& path) { return path + ".tmp"; }

// An optimizer's float arrays hold a value per parameter (momentum, Adam's moments), sliced like the
// parameters; its word arrays (a step count) are the same on every stage.
bool per_parameter(const StateView& s) { return s.words.empty(); }

// Where the values of [begin, begin + count) of this rank's flat buffer go in the whole model's arrays, with
// offsets from begin: all of its whole_segments, or those of a sharded optimizer's shard, which may cut a split
// layer's strided slice anywhere: the blocks it holds whole stay one strided run, a block it cuts is a piece
// of its own.
std::vector<WholeSegment> segments_of(const Model& model, std::size_t begin, std::size_t count) {
  if (begin == 0 && count == model.param_count()) return model.whole_segments();
  if (begin > model.param_count() || count > model.param_count() - begin)
    throw Error("optimizer state for parameters " + std::to_string(begin) + "-" + std::to_string(begin + count) +
                " of a model of " + std::to_string(model.param_count()));
  const std::size_t end = begin + count;
  std::vector<WholeSegment> out;
  for (const auto& seg : model.whole_segments()) {
    const std::size_t stop = std::min(seg.offset + seg.count * seg.blocks, end);
    for (std::size_t at = std::max(seg.offset, begin); at < stop;) {
      const std::size_t block = (at - seg.offset) / seg.count, within = (at - seg.offset) % seg.count;
      const std::size_t whole_at = seg.whole_offset + block * seg.stride + within;
      const std::size_t blocks = within == 0 ? (stop - at) / seg.count : 0;
      if (blocks > 0) {
        out.push_back({at - begin, whole_at, seg.count, blocks, blocks > 1 ? seg.stride : 0});
        at += blocks * seg.count;
      } else {
        const std::size_t n = std::min(seg.count - within, stop - at);
        out.push_back({at - begin, whole_at, n, 1, 0});
        at += n;
      }
    }
  }
  return out;
}

// This rank's values of a whole-model array, in the whole array's places.
void write_segments(const h5::Handle& loc, const std::string& name, const std::vector<WholeSegment>& segments,
                    std::span<const float> values) {
  for (const auto& seg : segments)
    h5::write_slice<float>(loc, name, seg.whole_offset, values.subspan(seg.offset, seg.count * seg.blocks), seg.blocks,
                           seg.stride);
}

void read_segments(const h5::Handle& loc, const std::string& name, const std::vector<WholeSegment>& segments,
                   std::span<float> values, const std::string& path) {
  for (const auto& seg : segments)
    h5::read_slice<float>(loc, name, seg.whole_offset, values.subspan(seg.offset, seg.count * seg.blocks), path,
                          seg.blocks, seg.stride);
}

// `tmp` names the file in messages.
void write_part(const h5::Handle& file, const std::string& tmp, Model& model, Optimizer& optimizer,
                const TrainingState& state, CheckpointPart part) {
  const bool first = part.creates;
  std::vector<std::string> names;
  if (first) {
    h5::write_fixed_strings_attribute(file, "ddl_format", {kMagic});
    h5::write_attribute(file, "format_version", std::int64_t{kVersion});
    h5::write_fixed_strings_attribute(file, "model", {state.model_name});
    h5::write_attribute(file, "epochs_done", static_cast<std::int64_t>(state.epochs_done));
    h5::write_attribute(file, "steps_done", static_cast<std::int64_t>(state.steps_done));
    h5::write_attribute(file, "seed", static_cast<std::int64_t>(state.seed));
    h5::write_attribute(file, "best_accuracy", std::vector<double>{state.best_accuracy});
    h5::write_fixed_strings_attribute(file, "configuration", {state.configuration});
    // Absent when empty (a model built without a dataset); the header checksum covers them either way.
    if (!state.class_names.empty()) h5::write_fixed_strings_attribute(file, "class_names", state.class_names);
    if (!state.input_mean.empty()) h5::write_attribute(file, "input_mean", state.input_mean);
    if (!state.input_std.empty()) h5::write_attribute(file, "input_std", state.input_std);
    if (!state.graph.empty()) {
      write_checksummed<std::uint8_t>(file, "graph", state.graph);
      h5::write_fixed_strings_attribute(file, "graph_names", state.graph_names);
    }
    create_checksummed_vector<float>(file, "params", model.whole_param_count());
    create_group(file, "model_state", tmp);
    h5::Handle opt = create_group(file, "optimizer_state", tmp);
    for (const auto& s : optimizer.state()) {
      if (per_parameter(s))
        create_checksummed_vector<float>(opt, s.name, model.whole_param_count());
      else
        write_states(opt, {s});
    }
  } else {
    names = h5::read_strings_attribute(file, "param_names", tmp);
  }
  if (part.params) {
    // The ranks of a split stage hold the same names: the first of them adds them.
    for (const auto& e : model.param_entries())
      if (std::find(names.begin(), names.end(), e.name) == names.end()) names.push_back(e.name);
    h5::write_fixed_strings_attribute(file, "param_names", names);
    // Every stage writes it; the last one's covers every name.
    h5::write_attribute(file, "header_checksum", static_cast<std::int64_t>(header_checksum(state, names, kVersion)));
    write_segments(file, "params", model.whole_segments(), model.params());
    if (part.layer_state) write_states(open_group(file, "model_state", tmp), model.state());
  }
  h5::Handle opt = open_group(file, "optimizer_state", tmp);
  for (const auto& s : optimizer.state())
    if (per_parameter(s)) write_segments(opt, s.name, segments_of(model, s.param_offset, s.floats.size()), s.floats);
  h5::flush(file, tmp);
}

}  // namespace

void write_checkpoint_part(const std::string& path, Model& stage, Optimizer& optimizer, const TrainingState& state,
                           CheckpointPart part) {
  const std::string tmp = temporary(path);
  try {
    write_part(part.creates ? create_checksummed_file(tmp) : h5::open_file_for_update(tmp), tmp, stage, optimizer,
               state, part);
  } catch (const std::exception& e) {
    std::error_code ignored;  // a half-written temporary (full disk, say) is of no use to anyone
    std::filesystem::remove(tmp, ignored);
    const auto dir = std::filesystem::path(tmp).parent_path();
    const auto space = std::filesystem::space(dir.empty() ? "." : dir, ignored);
    const bool full = !ignored && space.available < (std::uintmax_t{1} << 20);
    const std::string what = e.what();
    throw Error((what.find(tmp) == std::string::npos ? tmp + ": " + what : what) +
                (full ? " (the file system is full)" : "") + "; " + path + " is left as it was");
  }
}

std::string previous_checkpoint(const std::string& path) {
  std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + ".prev" + p.extension().string())).string();
}

void publish_checkpoint(const std::string& path, bool keep_previous) {
  const std::string tmp = temporary(path);
  fsync_path(tmp);
  std::error_code ec;
  if (keep_previous && std::filesystem::exists(path)) {
    // A second name for the current file, then the new one takes its place: at every moment `path` holds
    // a whole checkpoint, the new or the old.
    const std::string previous = previous_checkpoint(path);
    std::filesystem::remove(previous, ec);
    std::filesystem::create_hard_link(path, previous, ec);
    if (ec) std::filesystem::copy_file(path, previous, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) throw Error("cannot keep " + path + " as " + previous + ": " + ec.message());
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  const auto dir = std::filesystem::path(path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string());
}

void save_checkpoint(const std::string& path, Model& model, Optimizer& optimizer, const TrainingState& state,
                     bool keep_previous) {
  write_checkpoint_part(path, model, optimizer, state, {});
  publish_checkpoint(path, keep_previous);
}

namespace {

TrainingState load_unchecked(const h5::Handle& file, const std::string& path, Model& model, Optimizer* optimizer) {
  if (!h5::has_attribute(file, "ddl_format") || h5::read_string_attribute(file, "ddl_format", path) != kMagic)
    throw InputError(path + ": not a ddl_train checkpoint");
  const auto version = h5::read_int_attribute(file, "format_version", path);
  if (version < 1 || version > kVersion)
    throw InputError(path + ": checkpoint format version " + std::to_string(version) + ", this ddl reads " +
                     std::to_string(kVersion));
  TrainingState state;
  state.model_name = h5::read_string_attribute(file, "model", path);
  if (state.model_name != model.name())
    throw InputError(path + ": checkpoint of model '" + state.model_name + "', not '" + model.name() + "'");
  state.epochs_done = static_cast<std::uint64_t>(h5::read_int_attribute(file, "epochs_done", path));
  if (h5::has_attribute(file, "steps_done"))  // absent from checkpoints of earlier versions
    state.steps_done = static_cast<std::uint64_t>(h5::read_int_attribute(file, "steps_done", path));
  state.seed = static_cast<std::uint64_t>(h5::read_int_attribute(file, "seed", path));
  const auto best = h5::read_doubles_attribute(file, "best_accuracy", path);
  if (best.size() != 1) throw InputError(path + ": attribute 'best_accuracy' is not a single number");
  state.best_accuracy = best[0];
  state.configuration = h5::read_string_attribute(file, "configuration", path);
  if (h5::has_attribute(file, "class_names")) state.class_names = h5::read_strings_attribute(file, "class_names", path);
  if (h5::has_attribute(file, "input_mean")) state.input_mean = h5::read_doubles_attribute(file, "input_mean", path);
  if (h5::has_attribute(file, "input_std")) state.input_std = h5::read_doubles_attribute(file, "input_std", path);
  if (h5::has_attribute(file, "graph_names")) state.graph_names = h5::read_strings_attribute(file, "graph_names", path);
  if (h5::exists(file, "graph"))
    read_tensor(path, "graph", [&] { state.graph = h5::read_dataset<std::uint8_t>(file, "graph", path); });
  const auto shape = h5::dataset_shape(h5::open_dataset(file, "params", path), path);
  if (shape.size() != 1 || shape[0] != model.whole_param_count())
    throw InputError(path + ": checkpoint holds " + std::to_string(shape.empty() ? 0 : shape[0]) +
                     " parameters, model " + model.name() + " has " + std::to_string(model.whole_param_count()));
  const auto names = h5::read_strings_attribute(file, "param_names", path);
  if (version >= 2 && static_cast<std::uint64_t>(h5::read_int_attribute(file, "header_checksum", path)) !=
                          header_checksum(state, names, static_cast<int>(version)))
    throw InputError(path + ": its header (model, epochs, steps, seed, configuration, parameter and class names, "
                     "normalisation) is damaged "
                     "(its checksum does not match)");
  const auto& entries = model.param_entries();
  const auto at = entries.empty() ? names.end() : std::find(names.begin(), names.end(), entries[0].name);
  for (std::size_t e = 0; e < entries.size(); ++e)
    if (at == names.end() || at + static_cast<std::ptrdiff_t>(e) >= names.end() ||
        *(at + static_cast<std::ptrdiff_t>(e)) != entries[e].name)
      throw InputError(path + ": parameter " + entries[e].name + " is not where this model keeps it");
  read_tensor(path, "params", [&] { read_segments(file, "params", model.whole_segments(), model.params(), path); });
  h5::Handle states = open_group(file, "model_state", path);
  std::vector<StateView> present;
  // Weights imported from PyTorch hold no dropout generators: without an optimizer (not resuming) the
  // layers keep their own seeded ones.
  for (const auto& s : model.state())
    if (optimizer || s.words.empty() || h5::exists(states, s.name)) present.push_back(s);
  read_states(states, "model_state", present, path);
  if (optimizer) {
    h5::Handle opt = open_group(file, "optimizer_state", path);
    if (!optimizer->state().empty() && h5::member_names(opt, path).empty())
      throw InputError(path + ": holds weights only (launch/import_torch.py writes such files): start from it with "
                       "--init, not --resume");
    std::string expected, held;
    bool missing = false;
    for (const auto& s : optimizer->state()) {
      expected += (expected.empty() ? "" : ", ") + s.name;
      missing = missing || !h5::exists(opt, s.name);
    }
    if (missing) {
      for (const auto& name : h5::member_names(opt, path)) held += (held.empty() ? "" : ", ") + name;
      throw InputError(path + ": its optimizer state is " + held + ", not this run's optimizer's (" + expected +
                       "): resume with the optimizer that wrote it");
    }
    for (const auto& s : optimizer->state()) {
      if (per_parameter(s))
        read_tensor(path, "optimizer_state/" + s.name, [&] {
          read_segments(opt, s.name, segments_of(model, s.param_offset, s.floats.size()), s.floats, path);
        });
      else
        read_states(opt, "optimizer_state", {s}, path);
    }
  }
  return state;
}

// `open` gives the file, `path` names it.
template <typename Open>
TrainingState load_checked(Open open, const std::string& path, Model& model, Optimizer* optimizer) {
  try {
    return load_unchecked(open(), path, model, optimizer);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    // HDF5 failing on a structure it cannot parse: the file is damaged where no checksum is kept.
    std::string what = e.what();
    if (const auto at = what.rfind(": " + path); at != std::string::npos && at + 2 + path.size() == what.size())
      what.erase(at);
    throw InputError(path + ": damaged (" + what + ")");
  }
}

constexpr const char* kImageName = "the checkpoint in memory";

}  // namespace

TrainingState load_checkpoint(const std::string& path, Model& model, Optimizer* optimizer) {
  return load_checked([&] { return h5::open_file(path); }, path, model, optimizer);
}

void write_checkpoint_image_part(std::vector<char>& image, Model& stage, Optimizer& optimizer, const TrainingState& state,
                           CheckpointPart part) {
  const h5::Handle file = part.creates ? h5::create_memory_file(kImageName)
                                       : h5::open_file_image(image, true, kImageName);
  write_part(file, kImageName, stage, optimizer, state, part);
  image = h5::file_image(file, kImageName);
}

TrainingState load_checkpoint_image(std::span<const char> image, Model& model, Optimizer* optimizer) {
  return load_checked([&] { return h5::open_file_image(image, false, kImageName); }, kImageName, model, optimizer);
}

}  // namespace ddl
