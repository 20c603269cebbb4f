#include "comm/process_grid.hpp"

namespace ddl {

ProcessGrid::ProcessGrid(const Communicator& world, const Layout& layout)
    : position_(layout.position(world.rank())),
      pipeline_(world.split(position_.replica * layout.tensor + position_.t, position_.stage)),
      stage_replicas_(world.split(position_.stage * layout.tensor + position_.t, position_.replica)),
      tensor_(world.split(position_.replica * layout.stages + position_.stage, position_.t)),
      replica_ranks_(world.split(position_.replica, position_.stage * layout.tensor + position_.t)) {
  const std::string replica = std::to_string(position_.replica), stage = std::to_string(position_.stage);
  pipeline_.watch(world.hang_detector(), "the stages of replica " + replica);
  stage_replicas_.watch(world.hang_detector(), "the replicas of stage " + stage);
  tensor_.watch(world.hang_detector(), "the ranks that split stage " + stage + "'s layers");
  replica_ranks_.watch(world.hang_detector(), "the ranks of replica " + replica);
  if (layout.tensor > 1) tensor_group_.emplace(tensor_);
}

}  // namespace ddl
