#include "core/train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
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

void write_checkpoint_file(const std::string& tmp, Model& model, Optimizer& optimizer, const TrainingState& state) {
  {
    h5::Handle file = h5::create_file(tmp);
    h5::write_attribute(file, "ddl_format", std::string(kMagic));
    h5::write_attribute(file, "format_version", std::int64_t{kVersion});
    h5::write_attribute(file, "model", state.model_name);
    h5::write_attribute(file, "epochs_done", static_cast<std::int64_t>(state.epochs_done));
    h5::write_attribute(file, "seed", static_cast<std::int64_t>(state.seed));
    h5::write_attribute(file, "best_accuracy", std::vector<double>{state.best_accuracy});
    h5::write_attribute(file, "configuration", state.configuration);
    std::vector<std::string> names;
    for (const auto& e : model.param_entries()) names.push_back(e.name);
    h5::write_attribute(file, "param_names", names);
    h5::write_dataset<float>(file, "params", model.params(), {model.param_count()});
    write_states(create_group(file, "model_state", tmp), model.state());
    write_states(create_group(file, "optimizer_state", tmp), optimizer.state());
    h5::flush(file, tmp);
  }
  fsync_path(tmp);
}

}  // namespace

void save_checkpoint(const std::string& path, Model& model, Optimizer& optimizer, const TrainingState& state) {
  const std::string tmp = path + ".tmp";
  try {
    write_checkpoint_file(tmp, model, optimizer, state);
  } catch (...) {
    std::error_code ignored;  // a half-written temporary (full disk, say) is of no use to anyone
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  const auto dir = std::filesystem::path(path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string());
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
  state.seed = static_cast<std::uint64_t>(h5::read_int_attribute(file, "seed", path));
  state.best_accuracy = h5::read_doubles_attribute(file, "best_accuracy", path).at(0);
  state.configuration = h5::read_string_attribute(file, "configuration", path);
  h5::read_dataset_into<float>(file, "params", model.params(), path);
  read_states(open_group(file, "model_state", path), model.state(), path);
  if (optimizer) read_states(open_group(file, "optimizer_state", path), optimizer->state(), path);
  return state;
}

}  // namespace ddl
