// A job's checkpoints: written by the first replica's ranks in turn (core/train/checkpoint.hpp), resumed
// (--resume), started from (--init), and carried in memory to the next layout on a re-plan's move.
#pragma once

#include <string>
#include <vector>

#include "launch/train/job.hpp"
#include "launch/train/session.hpp"

namespace ddl {

// One checkpoint file, stage after stage and within a stage rank after rank of its tensor group.
// keep_previous: the file `path` held stays as previous_checkpoint(path) (for last.h5).
void save(const Job& job, Session& session, const std::string& path, bool keep_previous);
// --resume: every rank loads its part of the checkpoint, and the ranks agree whether all could. With
// auto, a damaged last.h5 (a flipped bit, a copy cut short) gives way to the one before it, said in one
// line. Returns false, each failing rank having printed its error, when none loads.
bool resume(Job& job, Session& session);
// --init, in a job that did not resume: the weights and BatchNorm statistics of a checkpoint of the same
// model, matched by name. Returns false, each failing rank having printed its error.
bool initialize(Job& job, Session& session);
// The job's checkpoint in memory, on every rank: the state the next layout's ranks take their slices from.
std::vector<char> pack_for_next_layout(const Job& job, Session& session);
// A session of a re-plan's move takes the state packed by the session before it, and frees the image.
void take_packed_state(Job& job, Session& session, std::vector<char>&& image);

}  // namespace ddl
