#include "comm/communicator.hpp"

#include <climits>
#include <utility>

#include "comm/mpi_error.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

// MPI counts are int: send large buffers in pieces.
constexpr std::size_t kMaxCount = INT_MAX / 2;

template <typename T, typename Fn>
void in_pieces(std::span<T> values, Fn fn) {
  for (std::size_t off = 0; off < values.size(); off += kMaxCount) {
    const std::size_t n = std::min(kMaxCount, values.size() - off);
    fn(values.data() + off, static_cast<int>(n));
  }
}

}  // namespace

Communicator::Communicator(MPI_Comm base) {
  MPI_Comm dup = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(base, &dup), "MPI_Comm_dup");
  *this = Communicator(dup, Adopt{});
}

Communicator::Communicator(MPI_Comm owned, Adopt) : comm_(owned) {
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      rank_(other.rank_),
      size_(other.size_),
      hang_(other.hang_),
      name_(std::move(other.name_)),
      members_(std::move(other.members_)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    Communicator old(std::move(*this));
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
    hang_ = other.hang_;
    name_ = std::move(other.name_);
    members_ = std::move(other.members_);
  }
  return *this;
}

Communicator::~Communicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

Communicator Communicator::split(int color, int key) const {
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split");
  Communicator part(out, Adopt{});
  if (hang_) part.watch(hang_, "some of " + name_);
  return part;
}

Communicator Communicator::split_shared() const {
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &out), "MPI_Comm_split_type");
  Communicator node(out, Adopt{});
  if (hang_) node.watch(hang_, "the ranks of this node among " + name_);
  return node;
}

void Communicator::barrier(HangDetector::LateRanks late) const {
  const auto wait = waiting("a barrier", std::move(late));
  check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
}

void Communicator::broadcast(std::span<float> values, int root) const {
  const auto wait = waiting("a broadcast");
  in_pieces(values, [&](float* p, int n) { check_mpi(MPI_Bcast(p, n, MPI_FLOAT, root, comm_), "MPI_Bcast"); });
}

void Communicator::broadcast(std::span<std::uint64_t> values, int root) const {
  const auto wait = waiting("a broadcast");
  in_pieces(values, [&](std::uint64_t* p, int n) { check_mpi(MPI_Bcast(p, n, MPI_UINT64_T, root, comm_), "MPI_Bcast"); });
}

void Communicator::broadcast(std::vector<char>& bytes, int root) const {
  std::uint64_t size[1] = {bytes.size()};
  broadcast(size, root);
  bytes.resize(size[0]);
  const auto wait = waiting("a broadcast");
  in_pieces(std::span<char>(bytes), [&](char* p, int n) { check_mpi(MPI_Bcast(p, n, MPI_BYTE, root, comm_), "MPI_Bcast"); });
}

void Communicator::pass_on(std::vector<char>& bytes, int from, int to) const {
  constexpr int kPassTag = 31;
  if (rank_ == from) {
    const auto wait = waiting_for("sending bytes", to, "to");
    std::uint64_t size = bytes.size();
    check_mpi(MPI_Send(&size, 1, MPI_UINT64_T, to, kPassTag, comm_), "MPI_Send");
    in_pieces(std::span<char>(bytes),
              [&](char* p, int n) { check_mpi(MPI_Send(p, n, MPI_BYTE, to, kPassTag, comm_), "MPI_Send"); });
  } else if (rank_ == to) {
    const auto wait = waiting_for("bytes", from);
    std::uint64_t size = 0;
    check_mpi(MPI_Recv(&size, 1, MPI_UINT64_T, from, kPassTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    bytes.resize(size);
    in_pieces(std::span<char>(bytes), [&](char* p, int n) {
      check_mpi(MPI_Recv(p, n, MPI_BYTE, from, kPassTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    });
  }
}

void Communicator::shift(std::span<const char> send, std::span<char> receive) const {
  constexpr int kShiftTag = 32;
  if (send.size() != receive.size() || send.size() > static_cast<std::size_t>(INT_MAX))
    throw Error("shift: " + std::to_string(send.size()) + " bytes sent against " + std::to_string(receive.size()) +
                " received (at most 2 GB, the same on both sides)");
  const int next = (rank_ + 1) % size_, before = (rank_ + size_ - 1) % size_;
  const auto wait = waiting_for("a message", before);
  const int n = static_cast<int>(send.size());
  MPI_Request requests[2];
  check_mpi(MPI_Irecv(receive.data(), n, MPI_BYTE, before, kShiftTag, comm_, &requests[0]), "MPI_Irecv");
  if (const int code = MPI_Isend(send.data(), n, MPI_BYTE, next, kShiftTag, comm_, &requests[1]); code != MPI_SUCCESS) {
    // The receive must not land in `receive` once the caller has unwound past it.
    MPI_Cancel(&requests[0]);
    MPI_Request_free(&requests[0]);
    check_mpi(code, "MPI_Isend");
  }
  check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
}

void Communicator::allreduce_sum(std::span<float> values) const {
  const auto wait = waiting("a sum (MPI_Allreduce)");
  in_pieces(values, [&](float* p, int n) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, comm_), "MPI_Allreduce");
  });
}

void Communicator::allreduce_sum(std::span<double> values) const {
  const auto wait = waiting("a sum (MPI_Allreduce)");
  in_pieces(values, [&](double* p, int n) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
  });
}

void Communicator::allreduce_max(std::span<double> values) const {
  const auto wait = waiting("a maximum (MPI_Allreduce)");
  in_pieces(values, [&](double* p, int n) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_DOUBLE, MPI_MAX, comm_), "MPI_Allreduce");
  });
}

void Communicator::allreduce_min(std::span<double> values) const {
  const auto wait = waiting("a minimum (MPI_Allreduce)");
  in_pieces(values, [&](double* p, int n) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_DOUBLE, MPI_MIN, comm_), "MPI_Allreduce");
  });
}

std::vector<std::uint64_t> Communicator::allgather(std::uint64_t value) const {
  const auto wait = waiting("an all-gather");
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
  check_mpi(MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather");
  return all;
}

std::vector<std::string> Communicator::gather(const std::string& text, int root) const {
  const auto wait = waiting("a gather");
  if (text.size() > static_cast<std::size_t>(INT_MAX)) throw Error("gather: a text of " + std::to_string(text.size()) + " bytes");
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(size_)), offsets(static_cast<std::size_t>(size_));
  check_mpi(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_), "MPI_Gather");
  std::string all;
  if (rank_ == root) {
    long long total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[static_cast<std::size_t>(r)] = static_cast<int>(total);
      total += lengths[static_cast<std::size_t>(r)];
    }
    if (total > INT_MAX) throw Error("gather: " + std::to_string(total) + " bytes in all");
    all.resize(static_cast<std::size_t>(total));
  }
  check_mpi(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, root,
                        comm_),
            "MPI_Gatherv");
  std::vector<std::string> texts;
  if (rank_ == root)
    for (int r = 0; r < size_; ++r)
      texts.push_back(all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                                 static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
  return texts;
}

bool Communicator::any(bool flag) const {
  const auto wait = waiting("an agreement (MPI_Allreduce)");
  int value = flag ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_LOR, comm_), "MPI_Allreduce");
  return value != 0;
}

void Communicator::check_same(const std::string& what, std::uint64_t fingerprint) const {
  const auto all = allgather(fingerprint);
  std::string differ;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty()) throw InputError(what + " differs between rank 0 and rank(s) " + differ);
}

int Communicator::world_rank(int r) const {
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  check_mpi(MPI_Comm_group(comm_, &mine), "MPI_Comm_group");
  check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  int out = MPI_UNDEFINED;
  const int rc = MPI_Group_translate_ranks(mine, 1, &r, world, &out);
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  check_mpi(rc, "MPI_Group_translate_ranks");
  return out;
}

void Communicator::watch(HangDetector* detector, const std::string& name) {
  hang_ = detector;
  name_ = name;
  members_ = name + " (rank";
  members_ += size_ > 1 ? "s " : " ";
  for (int r = 0; r < size_; ++r) members_ += (r ? ", " : "") + std::to_string(world_rank(r));
  members_ += ")";
}

HangDetector::Wait Communicator::waiting(const std::string& what, HangDetector::LateRanks late) const {
  return hang_ ? hang_->waiting("in " + what + " with " + members_, std::move(late)) : HangDetector::Wait();
}

HangDetector::Wait Communicator::waiting_for(const std::string& what, int peer, const char* preposition) const {
  return hang_ ? hang_->waiting(what + " " + preposition + " rank " + std::to_string(world_rank(peer)))
               : HangDetector::Wait();
}

}  // namespace ddl
