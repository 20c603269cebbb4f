// What a pipeline stage needs from its neighbours, without knowing how they are reached: core/ stays free
// of MPI, and comm/ provides the implementation over MPI point-to-point messages. Activations flow from
// the previous stage, gradients from the next; both in the plain layout, one message per micro-batch, as
// raw bytes: f32 values, or bf16 ones in a bf16 run (half the bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/tensor.hpp"

namespace ddl {

class StageLink {
 public:
  enum class Flow { activation, gradient };

  virtual ~StageLink() = default;
  virtual int stage() const = 0;
  virtual int stages() const = 0;
  bool has_previous() const { return stage() > 0; }
  bool has_next() const { return stage() + 1 < stages(); }

  // Once per new micro-batch size: the shape of this stage's output, to the next stage.
  virtual void send_dims(const dims_t& dims) = 0;
  virtual dims_t receive_dims() = 0;

  // Non-blocking: `into` (or `from`) must stay untouched until wait_receive (or wait_sends).
  virtual void post_receive(Flow flow, int micro, std::span<std::byte> into) = 0;
  virtual void wait_receive(Flow flow, int micro) = 0;
  virtual void send(Flow flow, int micro, std::span<const std::byte> from) = 0;
  virtual void wait_sends() = 0;
  // Called between layers while messages are in flight: MPI moves a large message only while one of its
  // two ends is inside an MPI call, so without this a stage's activations wait for its next wait (a
  // 2-stage ResNet-50 pipeline spent 47% of its step waiting instead of 28%).
  virtual void progress() = 0;

  // The first stage holds the labels, the last computes the loss.
  virtual void send_labels(std::span<const std::int32_t> labels) = 0;
  virtual void receive_labels(std::span<std::int32_t> labels) = 0;
  // Every stage gets the last stage's values (metrics only the last stage computes).
  virtual void broadcast_from_last(std::span<double> values) = 0;

  // Seconds spent blocked waiting for a neighbour's message since the last call.
  virtual double take_wait_seconds() = 0;
};

}  // namespace ddl
