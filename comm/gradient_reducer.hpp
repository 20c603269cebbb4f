// Averages a model's flat gradient buffer across replicas in fused buckets, overlapped with backward
// (after Horovod's fusion buffer and Flashlight's coalescing reducer). The model reports each layer's
// gradient range as soon as it is complete, last layer first; ranges are fused into buckets of at least
// `bucket_bytes`, and each full bucket is all-reduced on a communication thread while backward goes on
// with the earlier layers. finish() sends the rest and waits for every bucket.
//
// With sharded gradients (ZeRO's stage 2) each bucket is reduced only to the ranks that own its values
// (Allreducer::reduce_to_owners), and the whole 2 MB blocks of the bucket that this rank does not own go back
// to the kernel at once, so a rank's gradients at the end of backward are its shard and the buckets in flight.
//
// With sharded parameters (ZeRO's stage 3) the same queue also carries each layer's parameter gathers
// (Allreducer::gather_from_owners): one queue, so that every rank makes its collectives in the order the step
// asks for them, and a gather asked for a layer ahead overlaps the layer that runs meanwhile.
//
// MPI is called only from the communication thread while tasks are queued (from the first gather or ready
// range of a step to finish()); the caller's own collectives come after finish() has drained the queue, so the
// process needs MPI_THREAD_SERIALIZED, not MULTIPLE.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <thread>

#include "comm/allreduce.hpp"

namespace ddl {

class GradientReducer {
 public:
  enum class Reduction { all_reduce, to_owners };
  // threaded false: each bucket is reduced in ready() on the caller's thread, for layouts whose own messages
  // (a pipeline's) call MPI from that thread during backward, which MPI_THREAD_SERIALIZED forbids beside a
  // second thread's; backward then waits for each bucket, but the memory is released as early.
  GradientReducer(Allreducer& allreducer, std::size_t bucket_bytes, Reduction reduction, bool threaded = true);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Called from backward with consecutive ranges, in decreasing offset order, ending the previous one.
  void ready(std::span<float> gradients, std::size_t offset, std::size_t count);
  // Reduces what is left and blocks until every bucket of this step is averaged. Returns the seconds spent
  // waiting for communication here.
  double finish(std::span<float> gradients);
  std::size_t buckets_last_step() const { return buckets_last_step_; }
  // Queues copying params[offset, offset + count) from their owners; await_gather(ticket) blocks until done.
  std::uint64_t gather(std::span<float> params, std::size_t offset, std::size_t count);
  void await_gather(std::uint64_t ticket);

 private:
  // A bucket of gradients to reduce, or a range of parameters to gather.
  struct Task {
    enum class Kind { reduce, gather } kind;
    std::span<float> values;  // the whole buffer
    std::size_t offset, count;
  };
  std::uint64_t enqueue(Task task);  // returns its ticket
  void run(const Task& task);
  void reduce(const Task& bucket);
  void work();

  Allreducer& allreducer_;
  Reduction reduction_;
  std::size_t bucket_elements_;
  std::size_t pending_begin_ = 0, pending_end_ = 0;  // ready but not yet sent: [begin, end)
  bool step_open_ = false;
  std::size_t buckets_ = 0, buckets_last_step_ = 0;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::size_t in_flight_ = 0;
  // Tasks run in the order queued: those up to done_ are finished.
  std::uint64_t queued_ = 0, done_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;  // none when not threaded
};

}  // namespace ddl
