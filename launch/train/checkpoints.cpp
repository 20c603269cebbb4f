#include "launch/train/checkpoints.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/error.hpp"
#include "core/layers/param_slice.hpp"
#include "core/train/checkpoint.hpp"
#include "launch/error_line.hpp"
#include "launch/trained_model.hpp"

namespace ddl {
namespace {

void report(const Job& job, const std::string& message) { print_error_line("ddl_train", &job.world, message); }

// A loaded checkpoint's state becomes the job's, but for what this job's data says (set up by Job; a
// checkpoint of an older format has no class names).
void take_loaded_state(Job& job, TrainingState loaded) {
  loaded.class_names = std::move(job.state.class_names);
  loaded.input_mean = std::move(job.state.input_mean);
  loaded.input_std = std::move(job.state.input_std);
  job.state = std::move(loaded);
}

// Which checkpoints --resume names, in the order to try them.
std::vector<std::string> resume_candidates(const TrainOptions& o) {
  std::vector<std::string> candidates;
  if (o.resume_auto) {
    const std::string last = (std::filesystem::path(o.checkpoint_dir) / "last.h5").string();
    for (const auto& path : {last, previous_checkpoint(last)})
      if (std::filesystem::exists(path)) candidates.push_back(path);
  } else if (!o.resume.empty()) {
    candidates.push_back(o.resume);
  }
  return candidates;
}

// What --init found in its checkpoint for this rank's parameters.
struct InitSource {
  std::string fresh;  // this rank's classifier parameters, when they keep their initialisation
  int classes = 0;
  bool other_normalisation = false;
};

// Copies the checkpoint's weights and BatchNorm statistics into this rank's model, matched by name. The
// classifier, when the class count differs, keeps its fresh initialisation; any other parameter of another
// size there (another --image-size) is an error.
InitSource copy_initial_values(const Job& job, Model& model, const std::string& path) {
  Context ctx;
  const TrainedModel source = load_trained_model(path, ctx);
  if (source.model->name() != model.name())
    throw InputError("--init " + path + ": weights of model " + source.model->name() + ", not of --model " +
                     model.name());
  InitSource found;
  found.classes = source.model->num_classes();
  // Within float's precision: a run keeps its normalisation in float, an imported file in double.
  auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](double x, double y) { return std::abs(x - y) < 1e-6; });
  };
  found.other_normalisation =
      !same(source.state.input_mean, job.state.input_mean) || !same(source.state.input_std, job.state.input_std);
  const std::size_t classifier = model.whole_layer_count() - 1;
  std::map<std::string, std::span<const float>> values;
  const std::span<const float> from = source.model->params();
  for (const auto& e : source.model->param_entries()) values[e.name] = from.subspan(e.offset, e.size);
  for (const auto& s : source.model->state()) values[s.name] = s.floats;
  const std::span<float> to = model.params();
  for (const auto& e : model.param_entries()) {
    const auto it = values.find(e.name);
    if (it != values.end() && it->second.size() == whole_size(e.spec))
      take_slice(it->second, e.spec, to.subspan(e.offset, e.size));
    else if (model.first_layer() + e.layer == classifier && found.classes != model.num_classes())
      found.fresh += (found.fresh.empty() ? "" : ", ") + e.name;
    else
      throw InputError("--init " + path + ": " + e.name + " holds " +
                       std::to_string(it == values.end() ? 0 : it->second.size()) + " values there, " +
                       std::to_string(whole_size(e.spec)) + " here (trained with another --image-size or shape?)");
  }
  for (const auto& s : model.state()) {
    const auto it = values.find(s.name);
    if (!s.floats.empty() && it != values.end() && it->second.size() == s.floats.size())
      std::copy(it->second.begin(), it->second.end(), s.floats.begin());
  }
  return found;
}

}  // namespace

void save(const Job& job, Session& session, const std::string& path, bool keep_previous) {
  const GridPosition& p = session.position();
  // The first replica's ranks write in turn; where the optimizer's state is sharded, every rank takes a
  // turn, the other replicas adding their shards of it (world rank 0 is the first replica's, and creates).
  const bool sharded = session.optimizer->sharded();
  if (!sharded && p.replica != 0) return;
  const Communicator& writers = sharded ? job.world : session.grid.replica_ranks();
  for (int turn = 0; turn < writers.size(); ++turn) {
    if (turn == writers.rank()) {
      write_checkpoint_part(path, *session.model, *session.optimizer, job.state,
                            {turn == 0, p.replica == 0 && p.t == 0, p.replica == 0});
      if (turn + 1 == writers.size()) publish_checkpoint(path, keep_previous);
    }
    writers.barrier();
  }
}

bool resume(Job& job, Session& session) {
  const TrainOptions& o = job.options;
  const std::vector<std::string> candidates = resume_candidates(o);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    std::exception_ptr error;
    try {
      take_loaded_state(job, load_checkpoint(candidates[i], *session.model, session.optimizer.get()));
    } catch (...) {
      error = std::current_exception();
    }
    const bool any_failed = job.world.any(error != nullptr);
    if (!any_failed) {
      job.resume_path = candidates[i];
      break;
    }
    if (i + 1 == candidates.size()) {
      if (error) report(job, describe_exception(error));
      return false;
    }
    if (job.world.rank() == 0) {
      std::fprintf(
          stderr, "ddl_train: %s; resuming from %s instead\n",
          error ? describe_exception(error).c_str() : (candidates[i] + " cannot be read on every rank").c_str(),
          candidates[i + 1].c_str());
      std::fflush(stderr);
    }
  }
  if (!job.resume_path.empty() && job.state.seed != o.seed) {
    report(job, job.resume_path + " was written with --seed " + std::to_string(job.state.seed) +
                    "; resume with the same seed to continue the same run");
    return false;
  }
  return true;
}

bool initialize(Job& job, Session& session) {
  const std::string& path = job.options.init;
  if (path.empty() || !job.resume_path.empty()) return true;
  std::exception_ptr error;
  InitSource found;
  try {
    found = copy_initial_values(job, *session.model, path);
  } catch (...) {
    error = std::current_exception();
  }
  if (job.world.any(error != nullptr)) {
    if (error) report(job, describe_exception(error));
    return false;
  }
  // The classifier lives on the last stage: rank 0 learns from the others what they kept fresh.
  std::string all_fresh;
  for (const auto& part : job.world.gather(found.fresh, 0))
    if (!part.empty() && all_fresh.empty()) all_fresh = part;  // every replica of the last stage says the same
  job.init_note = "initialised from " + path;
  if (!all_fresh.empty())
    job.init_note += "; " + all_fresh + " start afresh (its classifier is for " + std::to_string(found.classes) +
                     " classes, this run's for " + std::to_string(session.model->num_classes()) + ")";
  if (found.other_normalisation)
    job.init_note += "\nnote: " + path + " was trained on inputs normalised otherwise than this run's (--normalize)";
  return true;
}

// Written in memory by the ranks that write a checkpoint (save), each passing the image on to the next,
// then handed from the last to every rank.
std::vector<char> pack_for_next_layout(const Job& job, Session& session) {
  job.world.hang_detector()->set_phase("moving to another layout");
  job.world.hang_detector()->starting_again();
  const GridPosition& p = session.position();
  const bool sharded = session.optimizer->sharded();
  std::vector<char> image;
  const Communicator& writers = sharded ? job.world : session.grid.replica_ranks();
  const int last = writers.size() - 1;
  if (sharded || p.replica == 0) {
    for (int turn = 0; turn <= last; ++turn) {
      if (turn == writers.rank())
        write_checkpoint_image_part(image, *session.model, *session.optimizer, job.state,
                                    {turn == 0, p.replica == 0 && p.t == 0, p.replica == 0});
      if (turn < last) writers.pass_on(image, turn, turn + 1);
    }
  }
  // World rank `last` wrote last: the first replica's ranks are world ranks 0 to S x T - 1.
  job.world.broadcast(image, last);
  return image;
}

void take_packed_state(Job& job, Session& session, std::vector<char>&& image) {
  const std::vector<char> packed = std::move(image);
  take_loaded_state(job, load_checkpoint_image(packed, *session.model, session.optimizer.get()));
}

}  // namespace ddl
