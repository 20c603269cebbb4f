#include "core/train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/data/hdf5.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

constexpr const char* kMagic = "ddl-checkpoint";
constexpr int kVersion = 1;

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
  return h5::Handle(h5::check_id(H5Gopen2(loc.get(), name.c_str(), H5P_DEFAULT), "cannot open group " + name, context));
}

void write_states(const h5::Handle& group, const std::vector<StateView>& states) {
  for (const auto& s : states) {
    if (!s.floats.empty())
      h5::write_dataset<float>(group, s.name, s.floats, {s.floats.size()});
    else
      h5::write_dataset<std::uint64_t>(group, s.name, s.words, {s.words.size()});
  }
}

void read_states(const h5::Handle& group, const std::vector<StateView>& states, const std::string& context) {
  for (const auto& s : states) {
    if (!s.floats.empty())
      h5::read_dataset_into<float>(group, s.name, s.floats, context);
    else
      h5::read_dataset_into<std::uint64_t>(group, s.name, s.words, context);
  }
}

}  // namespace

namespace {

std::string temporary(const std::string& path) { return path + ".tmp"; }

// An optimizer array with one value per parameter (momentum, Adam's moments) is sliced like the
// parameters; anything else (a step count) is the same on every stage.
bool per_parameter(const StateView& s, const Model& model) {
  return s.words.empty() && s.floats.size() == model.param_count();
}

void write_part(const std::string& tmp, Model& model, Optimizer& optimizer, const TrainingState& state) {
  const bool first = model.is_first_stage();
  h5::Handle file = first ? h5::create_file(tmp) : h5::open_file_for_update(tmp);
  std::vector<std::string> names;
  if (first) {
    h5::write_attribute(file, "ddl_format", std::string(kMagic));
    h5::write_attribute(file, "format_version", std::int64_t{kVersion});
    h5::write_attribute(file, "model", state.model_name);
    h5::write_attribute(file, "epochs_done", static_cast<std::int64_t>(state.epochs_done));
    h5::write_attribute(file, "steps_done", static_cast<std::int64_t>(state.steps_done));
    h5::write_attribute(file, "seed", static_cast<std::int64_t>(state.seed));
    h5::write_attribute(file, "best_accuracy", std::vector<double>{state.best_accuracy});
    h5::write_attribute(file, "configuration", state.configuration);
    h5::create_vector<float>(file, "params", model.whole_param_count());
    create_group(file, "model_state", tmp);
    h5::Handle opt = create_group(file, "optimizer_state", tmp);
    for (const auto& s : optimizer.state()) {
      if (per_parameter(s, model))
        h5::create_vector<float>(opt, s.name, model.whole_param_count());
      else
        write_states(opt, {s});
    }
  } else {
    names = h5::read_strings_attribute(file, "param_names", tmp);
  }
  for (const auto& e : model.param_entries()) names.push_back(e.name);
  h5::write_attribute(file, "param_names", names);
  h5::write_slice<float>(file, "params", model.param_offset(), model.params());
  write_states(open_group(file, "model_state", tmp), model.state());
  h5::Handle opt = open_group(file, "optimizer_state", tmp);
  for (const auto& s : optimizer.state())
    if (per_parameter(s, model)) h5::write_slice<float>(opt, s.name, model.param_offset(), s.floats);
  h5::flush(file, tmp);
}

}  // namespace

void write_checkpoint_part(const std::string& path, Model& stage, Optimizer& optimizer, const TrainingState& state) {
  const std::string tmp = temporary(path);
  try {
    write_part(tmp, stage, optimizer, state);
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

void publish_checkpoint(const std::string& path) {
  const std::string tmp = temporary(path);
  fsync_path(tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  const auto dir = std::filesystem::path(path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string());
}

void save_checkpoint(const std::string& path, Model& model, Optimizer& optimizer, const TrainingState& state) {
  write_checkpoint_part(path, model, optimizer, state);
  publish_checkpoint(path);
}

TrainingState load_checkpoint(const std::string& path, Model& model, Optimizer* optimizer) {
  h5::Handle file = h5::open_file(path);
  if (!h5::has_attribute(file, "ddl_format") || h5::read_string_attribute(file, "ddl_format", path) != kMagic)
    throw InputError(path + ": not a ddl checkpoint");
  const auto version = h5::read_int_attribute(file, "format_version", path);
  if (version != kVersion)
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
  state.best_accuracy = h5::read_doubles_attribute(file, "best_accuracy", path).at(0);
  state.configuration = h5::read_string_attribute(file, "configuration", path);
  const auto shape = h5::dataset_shape(h5::open_dataset(file, "params", path), path);
  if (shape.size() != 1 || shape[0] != model.whole_param_count())
    throw InputError(path + ": checkpoint holds " + std::to_string(shape.empty() ? 0 : shape[0]) +
                     " parameters, model " + model.name() + " has " + std::to_string(model.whole_param_count()));
  const auto names = h5::read_strings_attribute(file, "param_names", path);
  const auto& entries = model.param_entries();
  const auto at = entries.empty() ? names.end() : std::find(names.begin(), names.end(), entries[0].name);
  for (std::size_t e = 0; e < entries.size(); ++e)
    if (at == names.end() || at + static_cast<std::ptrdiff_t>(e) >= names.end() ||
        *(at + static_cast<std::ptrdiff_t>(e)) != entries[e].name)
      throw InputError(path + ": parameter " + entries[e].name + " is not where this model keeps it");
  h5::read_slice<float>(file, "params", model.param_offset(), model.params(), path);
  read_states(open_group(file, "model_state", path), model.state(), path);
  if (optimizer) {
    h5::Handle opt = open_group(file, "optimizer_state", path);
    for (const auto& s : optimizer->state()) {
      if (per_parameter(s, model))
        h5::read_slice<float>(opt, s.name, model.param_offset(), s.floats, path);
      else
        read_states(opt, {s}, path);
    }
  }
  return state;
}

}  // namespace ddl
