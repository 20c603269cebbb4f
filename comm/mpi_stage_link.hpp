// A pipeline stage's link to its neighbours over MPI: non-blocking point-to-point messages on the
// communicator of one pipeline (rank = stage), tagged by micro-batch so that receives can be posted for
// a whole step ahead and messages overlap with computation.
#pragma once

#include <map>
#include <vector>

#include "comm/communicator.hpp"
#include "core/train/stage_link.hpp"

namespace ddl {

class MpiStageLink : public StageLink {
 public:
  explicit MpiStageLink(const Communicator& pipeline) : comm_(pipeline) {}
  ~MpiStageLink() override;
  MpiStageLink(const MpiStageLink&) = delete;
  MpiStageLink& operator=(const MpiStageLink&) = delete;

  int stage() const override { return comm_.rank(); }
  int stages() const override { return comm_.size(); }
  void send_dims(const dims_t& dims) override;
  dims_t receive_dims() override;
  void post_receive(Flow flow, int micro, std::span<std::byte> into) override;
  void wait_receive(Flow flow, int micro) override;
  void send(Flow flow, int micro, std::span<const std::byte> from) override;
  void wait_sends() override;
  void progress() override;
  void send_labels(std::span<const std::int32_t> labels) override;
  void receive_labels(std::span<std::int32_t> labels) override;
  void broadcast_from_last(std::span<double> values) override;
  double take_wait_seconds() override;

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    int count = 0;
  };
  Pending& pending(Flow flow, int micro);
  void wait(MPI_Request& request, const char* what, int expected_count, MPI_Datatype type);

  const Communicator& comm_;
  std::vector<Pending> activations_, gradients_;  // receives, by micro-batch
  std::map<int, std::vector<MPI_Request>> sends_;  // by the rank they go to
  double wait_seconds_ = 0;
};

}  // namespace ddl
