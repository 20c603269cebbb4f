#include "comm/mpi_stage_link.hpp"

#include <chrono>
#include <climits>
#include <string>

#include "comm/mpi_error.hpp"

namespace ddl {
namespace {

constexpr int kDimsTag = 1, kLabelsTag = 2, kFirstMicroTag = 16;

int message_tag(StageLink::Flow flow, int micro) { return kFirstMicroTag + 2 * micro + (flow == StageLink::Flow::gradient); }

int count_of(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX)) throw Error("pipeline: a message of " + std::to_string(n) + " elements");
  return static_cast<int>(n);
}

}  // namespace

MpiStageLink::~MpiStageLink() {
  // Only reached with requests open when unwinding from an error: the job is being aborted then.
  for (auto* v : {&activations_, &gradients_})
    for (auto& p : *v)
      if (p.request != MPI_REQUEST_NULL) MPI_Request_free(&p.request);
  for (auto& [peer, requests] : sends_)
    for (auto& r : requests)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
}

MpiStageLink::Pending& MpiStageLink::pending(Flow flow, int micro) {
  auto& v = flow == Flow::activation ? activations_ : gradients_;
  if (v.size() <= static_cast<std::size_t>(micro)) v.resize(static_cast<std::size_t>(micro) + 1);
  return v[static_cast<std::size_t>(micro)];
}

void MpiStageLink::wait(MPI_Request& request, const char* what, int expected_count, MPI_Datatype type) {
  const auto t0 = std::chrono::steady_clock::now();
  MPI_Status status;
  check_mpi(MPI_Wait(&request, &status), what);
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int got = 0;
  check_mpi(MPI_Get_count(&status, type, &got), "MPI_Get_count");
  if (expected_count >= 0 && got != expected_count)
    throw Error(std::string(what) + ": expected " + std::to_string(expected_count) + " elements from rank " +
                std::to_string(status.MPI_SOURCE) + ", got " + std::to_string(got));
}

void MpiStageLink::send_dims(const dims_t& dims) {
  const std::vector<std::int64_t> d(dims.begin(), dims.end());
  check_mpi(MPI_Send(d.data(), count_of(d.size()), MPI_INT64_T, stage() + 1, kDimsTag, comm_.get()),
            "MPI_Send (pipeline shape)");
}

dims_t MpiStageLink::receive_dims() {
  MPI_Status status;
  const auto watch = comm_.waiting_for("receiving the output shape", stage() - 1);
  const auto t0 = std::chrono::steady_clock::now();
  check_mpi(MPI_Probe(stage() - 1, kDimsTag, comm_.get(), &status), "MPI_Probe (pipeline shape)");
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int n = 0;
  check_mpi(MPI_Get_count(&status, MPI_INT64_T, &n), "MPI_Get_count");
  std::vector<std::int64_t> d(static_cast<std::size_t>(n));
  check_mpi(MPI_Recv(d.data(), n, MPI_INT64_T, stage() - 1, kDimsTag, comm_.get(), MPI_STATUS_IGNORE),
            "MPI_Recv (pipeline shape)");
  return dims_t(d.begin(), d.end());
}

void MpiStageLink::post_receive(Flow flow, int micro, std::span<std::byte> into) {
  Pending& p = pending(flow, micro);
  if (p.request != MPI_REQUEST_NULL) throw Error("pipeline: a receive for micro-batch " + std::to_string(micro) + " is already open");
  p.count = count_of(into.size());
  const int peer = flow == Flow::activation ? stage() - 1 : stage() + 1;
  check_mpi(MPI_Irecv(into.data(), p.count, MPI_BYTE, peer, message_tag(flow, micro), comm_.get(), &p.request),
            "MPI_Irecv (pipeline)");
}

void MpiStageLink::wait_receive(Flow flow, int micro) {
  Pending& p = pending(flow, micro);
  const bool forward = flow == Flow::activation;
  const auto watch = comm_.waiting_for(std::string("receiving the ") + (forward ? "activations" : "gradients") +
                                           " of micro-batch " + std::to_string(micro),
                                       forward ? stage() - 1 : stage() + 1);
  wait(p.request, flow == Flow::activation ? "receiving activations" : "receiving gradients", p.count, MPI_BYTE);
}

void MpiStageLink::send(Flow flow, int micro, std::span<const std::byte> from) {
  const int peer = flow == Flow::activation ? stage() + 1 : stage() - 1;
  MPI_Request r = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(from.data(), count_of(from.size()), MPI_BYTE, peer, message_tag(flow, micro), comm_.get(), &r),
            "MPI_Isend (pipeline)");
  sends_[peer].push_back(r);
}

void MpiStageLink::wait_sends() {
  const auto t0 = std::chrono::steady_clock::now();
  // Peer by peer, so that a timed-out wait names the rank that does not take its messages.
  for (auto& [peer, requests] : sends_) {
    const auto watch = comm_.waiting_for("sending this step's messages", peer, "to");
    check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall (pipeline)");
  }
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sends_.clear();
}

void MpiStageLink::progress() {
  // A probe enters MPI's progress engine and takes no message.
  int flag = 0;
  check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_.get(), &flag, MPI_STATUS_IGNORE), "MPI_Iprobe (pipeline)");
}

void MpiStageLink::send_labels(std::span<const std::int32_t> labels) {
  MPI_Request r = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(labels.data(), count_of(labels.size()), MPI_INT32_T, stages() - 1, kLabelsTag, comm_.get(), &r),
            "MPI_Isend (labels)");
  sends_[stages() - 1].push_back(r);
}

void MpiStageLink::receive_labels(std::span<std::int32_t> labels) {
  MPI_Request r = MPI_REQUEST_NULL;
  check_mpi(MPI_Irecv(labels.data(), count_of(labels.size()), MPI_INT32_T, 0, kLabelsTag, comm_.get(), &r),
            "MPI_Irecv (labels)");
  const auto watch = comm_.waiting_for("receiving the labels", 0);
  wait(r, "receiving labels", count_of(labels.size()), MPI_INT32_T);
}

void MpiStageLink::broadcast_from_last(std::span<double> values) {
  const auto watch = comm_.waiting("the broadcast of the last stage's metrics");
  check_mpi(MPI_Bcast(values.data(), count_of(values.size()), MPI_DOUBLE, stages() - 1, comm_.get()),
            "MPI_Bcast (pipeline metrics)");
}

double MpiStageLink::take_wait_seconds() {
  const double s = wait_seconds_;
  wait_seconds_ = 0;
  return s;
}

}  // namespace ddl
