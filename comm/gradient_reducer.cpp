#include "comm/gradient_reducer.hpp"

#include <chrono>

#include "core/aligned_buffer.hpp"
#include "core/error.hpp"

namespace ddl {

GradientReducer::GradientReducer(Allreducer& allreducer, std::size_t bucket_bytes, Reduction reduction,
                                 bool threaded)
    : allreducer_(allreducer),
      reduction_(reduction),
      bucket_elements_(std::max<std::size_t>(1, bucket_bytes / sizeof(float))) {
  if (threaded) worker_ = std::thread([this] { work(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void GradientReducer::ready(std::span<float> gradients, std::size_t offset, std::size_t count) {
  if (!step_open_) {
    step_open_ = true;
    pending_begin_ = pending_end_ = offset + count;
    buckets_ = 0;
  }
  if (offset + count != pending_begin_)
    throw Error("gradient reducer: gradient ranges must arrive last layer first and contiguous");
  pending_begin_ = offset;
  if (pending_end_ - pending_begin_ >= bucket_elements_) {
    enqueue({Task::Kind::reduce, gradients, pending_begin_, pending_end_ - pending_begin_});
    pending_end_ = pending_begin_;
  }
}

double GradientReducer::finish(std::span<float> gradients) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!step_open_) {
    enqueue({Task::Kind::reduce, gradients, 0, gradients.size()});  // no layer reported: reduce everything now
  } else if (pending_end_ > pending_begin_) {
    enqueue({Task::Kind::reduce, gradients, pending_begin_, pending_end_ - pending_begin_});
  }
  if (step_open_ && pending_begin_ != 0)
    throw Error("gradient reducer: backward reported gradients down to offset " + std::to_string(pending_begin_) +
                ", not 0");
  step_open_ = false;
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return (queue_.empty() && in_flight_ == 0) || error_; });
  if (error_) std::rethrow_exception(error_);
  buckets_last_step_ = buckets_;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::uint64_t GradientReducer::gather(std::span<float> params, std::size_t offset, std::size_t count) {
  return enqueue({Task::Kind::gather, params, offset, count});
}

void GradientReducer::await_gather(std::uint64_t ticket) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done_ >= ticket || error_; });
  if (error_) std::rethrow_exception(error_);
}

std::uint64_t GradientReducer::enqueue(Task task) {
  if (task.kind == Task::Kind::reduce) ++buckets_;
  if (!worker_.joinable()) {
    run(task);
    return done_ = ++queued_;
  }
  std::uint64_t ticket;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(task);
    ticket = ++queued_;
  }
  cv_.notify_all();
  return ticket;
}

void GradientReducer::run(const Task& task) {
  if (task.kind == Task::Kind::gather)
    allreducer_.gather_from_owners(task.values, task.offset, task.count);
  else
    reduce(task);
}

void GradientReducer::reduce(const Task& b) {
  if (reduction_ == Reduction::all_reduce) {
    allreducer_.run(b.values.subspan(b.offset, b.count), ReduceOp::average);
    return;
  }
  allreducer_.reduce_to_owners(b.values, b.offset, b.count, ReduceOp::average);
  const Communicator& comm = allreducer_.communicator();
  const IndexRange mine = ring_shard(b.values.size(), comm.size(), comm.rank());
  // Buckets are reduced in turn from the buffer's end down: a block that straddles this bucket's end and the
  // start of the bucket reduced before it is now reduced whole, so the range given back reaches a block on.
  const std::size_t end = std::min(b.values.size(), b.offset + b.count + kReleaseBlockBytes / sizeof(float));
  release_pages_outside(b.values, b.offset, end, mine.begin, mine.end);
}

void GradientReducer::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const Task task = queue_.front();
    queue_.pop_front();
    if (error_) continue;  // the step has failed; finish() or await_gather() reports it
    ++in_flight_;
    lock.unlock();
    try {
      run(task);
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      --in_flight_;
      cv_.notify_all();
      continue;
    }
    lock.lock();
    --in_flight_;
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace ddl
