#include "comm/allreduce.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <exception>

#include "core/bf16.hpp"
#include "comm/mpi_error.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

// Outstanding non-blocking requests; any still pending when an error unwinds are cancelled and freed.
class Requests {
 public:
  ~Requests() {
    for (auto& r : requests_)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
  }
  MPI_Request* add() { return &requests_.emplace_back(MPI_REQUEST_NULL); }
  std::vector<MPI_Request>& all() { return requests_; }

 private:
  std::vector<MPI_Request> requests_;
};

int modulo(int a, int n) { return ((a % n) + n) % n; }

// Above the ring's step tags (0 .. 2 n - 3) and within the 32,767 every MPI allows.
constexpr int kOwnerChainTag = 32767;

}  // namespace

std::string to_string(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::ring:
      return "ring";
    case AllreduceAlgorithm::hierarchical:
      return "hier";
    case AllreduceAlgorithm::mpi:
      return "mpi";
  }
  return "?";
}

// An MPI-3 shared-memory window of `bytes` per rank of a node, locked for the owner's lifetime; every
// rank's part is addressable by every other. Collective over `local` to create.
class SharedWindow {
 public:
  SharedWindow(const Communicator& local, std::size_t bytes, const char* purpose) {
    void* mine = nullptr;
    const int rc =
        MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL, local.get(), &mine, &window_);
    // Most often /dev/shm is too small (Docker gives containers 64 MB unless told otherwise).
    if (rc != MPI_SUCCESS)
      throw Error(std::string(purpose) + " could not get " + std::to_string(std::max<std::size_t>(1, bytes >> 20)) +
                  " MB of shared memory per rank of this node (" + mpi_error_text(rc) +
                  "): give /dev/shm more room (docker: --shm-size) or use --allreduce ring");
    check_mpi(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_), "MPI_Win_lock_all");
    bases_.assign(static_cast<std::size_t>(local.size()), nullptr);
    for (int r = 0; r < local.size(); ++r) {
      MPI_Aint size = 0;
      int unit = 0;
      check_mpi(MPI_Win_shared_query(window_, r, &size, &unit, &bases_[r]), "MPI_Win_shared_query");
    }
  }
  ~SharedWindow() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // MPI_Win_free is collective: while an error unwinds this rank, the others are not coming, and the
    // job is about to be aborted anyway, so the window is left to the process's exit.
    if (!finalized && std::uncaught_exceptions() == 0) {
      MPI_Win_unlock_all(window_);
      MPI_Win_free(&window_);
    }
  }
  SharedWindow(const SharedWindow&) = delete;
  SharedWindow& operator=(const SharedWindow&) = delete;

  template <typename T>
  T* part(int rank) const { return static_cast<T*>(bases_[rank]); }
  // Makes this rank's writes to the window visible to the others, and theirs to it.
  void sync() const { check_mpi(MPI_Win_sync(window_), "MPI_Win_sync"); }

 private:
  MPI_Win window_ = MPI_WIN_NULL;
  std::vector<void*> bases_;
};

// The node-local half of the hierarchical all-reduce: a shared-memory window per rank of the node for
// the data, and per rank a count of the barriers it has reached and whether it is in the all-reduce
// between nodes (the node's leader), read only to name the ranks a timed-out barrier waits for
// (MPI_Barrier itself cannot say).
class Allreducer::SharedNode {
  // Shared between processes: only lock-free atomics work across address spaces.
  static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free);
  enum Word { kBarriers, kBetweenNodes, kWords };

 public:
  explicit SharedNode(const Communicator& comm)
      : local_(comm.split_shared()),
        leaders_(comm.split(local_.rank() == 0 ? 0 : 1, comm.rank())),
        arrivals_(local_, kWords * sizeof(std::uint64_t), "the shared-memory all-reduce (--allreduce hier)") {
    for (int r = 0; r < local_.size(); ++r) world_ranks_.push_back(local_.world_rank(r));
    for (int w = 0; w < kWords; ++w) word(local_.rank(), static_cast<Word>(w)).store(0);
    arrivals_.sync();
    local_.barrier();
  }

  const Communicator& local() const { return local_; }
  // Leaders of all nodes; meaningful only on local rank 0.
  const Communicator& leaders() const { return leaders_; }
  // Every local rank's window, at least `count` floats each. Collective over the node.
  std::vector<float*>& windows(std::size_t count) {
    if (count > capacity_) {
      data_.reset();
      capacity_ = 0;
      const std::size_t capacity = std::max<std::size_t>(count, 1024);
      data_ = std::make_unique<SharedWindow>(local_, capacity * sizeof(float),
                                             "the shared-memory all-reduce (--allreduce hier)");
      capacity_ = capacity;
      bases_.resize(static_cast<std::size_t>(local_.size()));
      for (int r = 0; r < local_.size(); ++r) bases_[r] = data_->part<float>(r);
    }
    return bases_;
  }
  // Makes every local rank's writes so far visible to the others.
  void sync() {
    data_->sync();
    const std::uint64_t barrier = ++barriers_;
    word(local_.rank(), kBarriers).store(barrier, std::memory_order_release);
    local_.barrier([this, barrier] { return late_ranks(barrier); });
    data_->sync();
  }
  // The leader says so while it is in the all-reduce between nodes, which names its own peers.
  void between_nodes(bool in) { word(local_.rank(), kBetweenNodes).store(in ? 1 : 0, std::memory_order_release); }

 private:
  std::atomic_ref<std::uint64_t> word(int rank, Word w) const { return std::atomic_ref(arrivals_.part<std::uint64_t>(rank)[w]); }

  // Called by the hang detector's watcher thread: plain loads from shared memory, no MPI.
  std::string late_ranks(std::uint64_t barrier) const {
    std::string late;
    int count = 0;
    for (int r = 0; r < local_.size(); ++r)
      if (word(r, kBarriers).load(std::memory_order_acquire) < barrier) {
        late += (count++ ? ", " : "") + std::to_string(world_ranks_[r]);
        if (word(r, kBetweenNodes).load(std::memory_order_acquire))
          late += " (this node's leader, in the all-reduce between nodes)";
      }
    // Every rank announced its arrival, yet the barrier has not ended: one stopped between announcing
    // and taking part (a SIGSTOP can land there), which shared memory cannot tell apart.
    if (count == 0) return "which every rank has reached, one stopping inside it";
    return (count == 1 ? "which rank " + late + " has" : "which ranks " + late + " have") + " not reached";
  }

  Communicator local_, leaders_;
  std::vector<int> world_ranks_;
  SharedWindow arrivals_;
  std::uint64_t barriers_ = 0;
  std::unique_ptr<SharedWindow> data_;
  std::size_t capacity_ = 0;
  std::vector<float*> bases_;
};

Allreducer::Allreducer(const Communicator& comm, const AllreduceOptions& options) : comm_(comm), options_(options) {
  if (options_.chunk_bytes < 64) throw InputError("all-reduce chunk size must be at least 64 bytes");
  if (options_.algorithm == AllreduceAlgorithm::hierarchical) node_ = std::make_unique<SharedNode>(comm);
}

Allreducer::~Allreducer() = default;

void Allreducer::run(std::span<float> data, ReduceOp op) {
  if (comm_.size() > 1 && !data.empty()) {
    switch (options_.algorithm) {
      case AllreduceAlgorithm::ring:
        ring(comm_, data, RingPhases::both, options_.wire);
        break;
      case AllreduceAlgorithm::hierarchical:
        hierarchical(data);
        break;
      case AllreduceAlgorithm::mpi:
        comm_.allreduce_sum(data);
        break;
    }
  }
  if (op == ReduceOp::average && comm_.size() > 1) {
    const float scale = 1.0f / static_cast<float>(comm_.size());
    for (auto& v : data) v *= scale;
  }
}

IndexRange ring_shard(std::size_t count, int ranks, int rank) {
  // After the reduce-scatter's n - 1 steps, rank r holds the sums of segment r + 1.
  const auto segment = static_cast<std::size_t>((rank + 1) % ranks);
  return {count * segment / static_cast<std::size_t>(ranks), count * (segment + 1) / static_cast<std::size_t>(ranks)};
}

void Allreducer::reduce_scatter(std::span<float> data, ReduceOp op) {
  if (comm_.size() == 1 || data.empty()) return;
  ring(comm_, data, RingPhases::reduce_scatter, options_.wire);
  if (op == ReduceOp::average) {
    const float scale = 1.0f / static_cast<float>(comm_.size());
    const IndexRange mine = ring_shard(data.size(), comm_.size(), comm_.rank());
    for (std::size_t i = mine.begin; i < mine.end; ++i) data[i] *= scale;
  }
}

void Allreducer::all_gather(std::span<float> data) {
  if (comm_.size() > 1 && !data.empty()) ring(comm_, data, RingPhases::all_gather, WireType::f32);
}

void Allreducer::reduce_to_owners(std::span<float> data, std::size_t offset, std::size_t count, ReduceOp op) {
  if (offset + count > data.size()) throw Error("reduce to owners: range past the end of the buffer");
  const int n = comm_.size();
  if (n == 1 || count == 0) return;
  for (int owner = 0; owner < n; ++owner) {
    const IndexRange shard = ring_shard(data.size(), n, owner);
    const std::size_t begin = std::max(shard.begin, offset), end = std::min(shard.end, offset + count);
    if (begin >= end) continue;
    chain(data.subspan(begin, end - begin), owner + 1, true, "a gradient bucket's reduction");
    if (op == ReduceOp::average && owner == comm_.rank()) {
      const float scale = 1.0f / static_cast<float>(n);
      for (std::size_t i = begin; i < end; ++i) data[i] *= scale;
    }
  }
}

// A piece passed round the ring in chunks from rank `start` to the rank before it, each rank passing each chunk
// on as it arrives: added to its own values (a reduction to the last rank) or taken in their place (a copy from
// the first). A reduction to an owner starts at the rank after it, as the ring's reduce-scatter starts the
// owner's segment there, so each value is summed in the same order.
void Allreducer::chain(std::span<float> piece, int start, bool add, const std::string& what) {
  const int n = comm_.size(), rank = comm_.rank();
  const int position = modulo(rank - start, n);  // 0 starts, n - 1 ends
  const int right = modulo(rank + 1, n), left = modulo(rank - 1, n);
  const std::size_t chunk = std::max<std::size_t>(1, std::min<std::size_t>(options_.chunk_bytes / 4, INT_MAX / 4));
  const std::size_t count = piece.size();
  auto chunk_size = [&](std::size_t off) { return static_cast<int>(std::min(chunk, count - off)); };
  Requests recvs, sends;
  if (position == 0) {
    for (std::size_t off = 0; off < count; off += chunk)
      check_mpi(MPI_Isend(piece.data() + off, chunk_size(off), MPI_FLOAT, right, kOwnerChainTag, comm_.get(), sends.add()),
                "MPI_Isend");
  } else {
    float* into = piece.data();
    if (add) {
      recv_f32_.resize(count);
      into = recv_f32_.data();
    }
    for (std::size_t off = 0; off < count; off += chunk)
      check_mpi(MPI_Irecv(into + off, chunk_size(off), MPI_FLOAT, left, kOwnerChainTag, comm_.get(), recvs.add()),
                "MPI_Irecv");
    // In order: the chunks go on in the order they came, which the next rank's receives expect.
    const auto receiving = comm_.waiting_for("receiving " + what, left);
    auto& pending = recvs.all();
    for (std::size_t index = 0; index < pending.size(); ++index) {
      check_mpi(MPI_Wait(&pending[index], MPI_STATUS_IGNORE), "MPI_Wait");
      const std::size_t off = index * chunk;
      const int len = chunk_size(off);
      float* out = piece.data() + off;
      if (add)
        for (int i = 0; i < len; ++i) out[i] += into[off + static_cast<std::size_t>(i)];
      if (position < n - 1)
        check_mpi(MPI_Isend(out, len, MPI_FLOAT, right, kOwnerChainTag, comm_.get(), sends.add()), "MPI_Isend");
    }
  }
  const auto sending = comm_.waiting(what + " (sending to rank " + std::to_string(comm_.world_rank(right)) + ")");
  auto& outgoing = sends.all();
  check_mpi(MPI_Waitall(static_cast<int>(outgoing.size()), outgoing.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

void Allreducer::gather_from_owners(std::span<float> data, std::size_t offset, std::size_t count) {
  if (offset + count > data.size()) throw Error("gather from owners: range past the end of the buffer");
  const int n = comm_.size();
  if (n == 1 || count == 0) return;
  for (int owner = 0; owner < n; ++owner) {
    const IndexRange shard = ring_shard(data.size(), n, owner);
    const std::size_t begin = std::max(shard.begin, offset), end = std::min(shard.end, offset + count);
    // Received straight into place: what a rank held outside its shard is replaced, not added to.
    if (begin < end) chain(data.subspan(begin, end - begin), owner, false, "a layer's parameters");
  }
}

void Allreducer::ring(const Communicator& comm, std::span<float> data, RingPhases phases, WireType wire) {
  const int n = comm.size(), rank = comm.rank();
  if (n == 1 || data.empty()) return;
  const std::size_t count = data.size();
  auto begin = [&](int segment) { return count * static_cast<std::size_t>(segment) / n; };
  std::size_t largest = 0;
  for (int s = 0; s < n; ++s) largest = std::max(largest, begin(s + 1) - begin(s));
  const bool bf16 = wire == WireType::bf16;
  const std::size_t chunk =
      std::max<std::size_t>(1, std::min<std::size_t>(options_.chunk_bytes / (bf16 ? 2 : 4), INT_MAX / 4));
  recv_f32_.resize(bf16 ? 0 : largest);
  send_wire_.resize(bf16 ? largest : 0);
  recv_wire_.resize(bf16 ? largest : 0);
  const int right = modulo(rank + 1, n), left = modulo(rank - 1, n);
  const MPI_Datatype type = bf16 ? MPI_UINT16_T : MPI_FLOAT;

  // Steps 0 .. n-2 reduce-scatter (received chunks are added), steps n-1 .. 2n-3 all-gather (copied).
  const int first = phases == RingPhases::all_gather ? n - 1 : 0;
  const int end = phases == RingPhases::reduce_scatter ? n - 1 : 2 * n - 2;
  for (int step = first; step < end; ++step) {
    const bool reduce = step < n - 1;
    const int k = reduce ? step : step - (n - 1);
    const int send_segment = reduce ? modulo(rank - k, n) : modulo(rank + 1 - k, n);
    const int recv_segment = reduce ? modulo(rank - k - 1, n) : modulo(rank - k, n);
    float* send = data.data() + begin(send_segment);
    const std::size_t send_count = begin(send_segment + 1) - begin(send_segment);
    float* recv_into = data.data() + begin(recv_segment);
    const std::size_t recv_count = begin(recv_segment + 1) - begin(recv_segment);

    if (bf16) {
      // The segment this rank finished reducing leaves as bf16: keep the same rounding here, so that
      // every replica ends with identical values.
      if (step == n - 1)
        for (std::size_t i = 0; i < send_count; ++i) send[i] = from_bf16(to_bf16(send[i]));
      for (std::size_t i = 0; i < send_count; ++i) send_wire_[i] = to_bf16(send[i]);
    }
    // The copy phase with an f32 wire receives straight into place.
    void* recv_buffer = bf16     ? static_cast<void*>(recv_wire_.data())
                        : reduce ? static_cast<void*>(recv_f32_.data())
                                 : static_cast<void*>(recv_into);
    const std::size_t element = bf16 ? 2 : 4;

    Requests recvs, sends;
    for (std::size_t off = 0; off < recv_count; off += chunk)
      check_mpi(
          MPI_Irecv(static_cast<char*>(recv_buffer) + off * element,
                    static_cast<int>(std::min(chunk, recv_count - off)), type, left, step, comm.get(), recvs.add()),
          "MPI_Irecv");
    const void* send_buffer = bf16 ? static_cast<const void*>(send_wire_.data()) : static_cast<const void*>(send);
    for (std::size_t off = 0; off < send_count; off += chunk)
      check_mpi(
          MPI_Isend(static_cast<const char*>(send_buffer) + off * element,
                    static_cast<int>(std::min(chunk, send_count - off)), type, right, step, comm.get(), sends.add()),
          "MPI_Isend");
    // Reduce (or unpack) each chunk as it arrives while the later ones are still in flight.
    const auto receiving = comm.waiting_for("receiving a ring all-reduce step", left);
    auto& pending = recvs.all();
    for (std::size_t done = 0; done < pending.size(); ++done) {
      int index = MPI_UNDEFINED;
      check_mpi(MPI_Waitany(static_cast<int>(pending.size()), pending.data(), &index, MPI_STATUS_IGNORE),
                "MPI_Waitany");
      const std::size_t off = static_cast<std::size_t>(index) * chunk, len = std::min(chunk, recv_count - off);
      float* out = recv_into + off;
      if (bf16) {
        const std::uint16_t* in = recv_wire_.data() + off;
        if (reduce)
          for (std::size_t i = 0; i < len; ++i) out[i] += from_bf16(in[i]);
        else
          for (std::size_t i = 0; i < len; ++i) out[i] = from_bf16(in[i]);
      } else if (reduce) {
        const float* in = recv_f32_.data() + off;
        for (std::size_t i = 0; i < len; ++i) out[i] += in[i];
      }
    }
    const auto sending = comm.waiting("a ring all-reduce step (sending to rank " + std::to_string(comm.world_rank(right)) + ")");
    auto& outgoing = sends.all();
    check_mpi(MPI_Waitall(static_cast<int>(outgoing.size()), outgoing.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }
}

void Allreducer::hierarchical(std::span<float> data) {
  const Communicator& local = node_->local();
  const std::size_t count = data.size();
  const int l = local.size(), me = local.rank();
  auto slice = [&](int r) { return std::pair{count * r / l, count * (r + 1) / l}; };
  // Each window holds this rank's input in [0, count) and the node's sums of its slice in [count, 2 count).
  std::vector<float*>& windows = node_->windows(2 * count);
  std::memcpy(windows[me], data.data(), count * sizeof(float));
  node_->sync();
  const auto [begin, end] = slice(me);
  float* sums = windows[me] + count;
  std::memcpy(sums + begin, windows[0] + begin, (end - begin) * sizeof(float));
  for (int r = 1; r < l; ++r) {  // in rank order, so every run sums in the same order
    const float* in = windows[r];
    for (std::size_t i = begin; i < end; ++i) sums[i] += in[i];
  }
  node_->sync();
  auto gather_slices = [&] {
    for (int r = 0; r < l; ++r) {
      const auto [b, e] = slice(r);
      std::memcpy(data.data() + b, windows[r] + count + b, (e - b) * sizeof(float));
    }
  };
  if (comm_.size() == l) {
    gather_slices();  // one node: the result is the node's sums
  } else {
    // Several nodes: the leaders run the ring on their nodes' sums and share the result.
    if (me == 0) {
      gather_slices();
      node_->between_nodes(true);
      ring(node_->leaders(), data, RingPhases::both, options_.wire);
      node_->between_nodes(false);
      std::memcpy(windows[0] + count, data.data(), count * sizeof(float));
    }
    node_->sync();
    if (me != 0) std::memcpy(data.data(), windows[0] + count, count * sizeof(float));
  }
  node_->sync();  // nobody rewrites its window while others still read it
}

}  // namespace ddl
