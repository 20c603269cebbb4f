// A move-only owner of a duplicated MPI communicator (after Aluminum's): ddl's traffic never mixes with
// the application's, errors come back as codes (MPI_ERRORS_RETURN) and become exceptions, and the
// communicator is freed on destruction unless MPI is already finalised.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/hang_detector.hpp"

namespace ddl {

class Communicator {
 public:
  // Duplicates `base` (MPI_COMM_WORLD by default).
  explicit Communicator(MPI_Comm base = MPI_COMM_WORLD);
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm get() const { return comm_; }

  // Ranks with the same color form a sub-communicator, ordered by key. Sub-communicators are timed by
  // the same hang detector.
  Communicator split(int color, int key) const;
  // The ranks that share this node's memory.
  Communicator split_shared() const;

  // `late` names the ranks that have not arrived, if the barrier times out (see HangDetector::waiting).
  void barrier(HangDetector::LateRanks late = {}) const;
  void broadcast(std::span<float> values, int root) const;
  void broadcast(std::span<std::uint64_t> values, int root) const;
  // Bytes whose count only `root` knows: every rank returns with root's.
  void broadcast(std::vector<char>& bytes, int root) const;
  // Rank `from` sends its bytes to rank `to`, which returns with them; the other ranks do nothing.
  void pass_on(std::vector<char>& bytes, int from, int to) const;
  // Each rank sends `send` to the next rank (the last to the first) and receives as many bytes from the one
  // before, both non-blocking as pipeline stages pass their messages: for timing those messages.
  void shift(std::span<const char> send, std::span<char> receive) const;
  // In-place sums with MPI_Allreduce.
  void allreduce_sum(std::span<float> values) const;
  void allreduce_sum(std::span<double> values) const;
  void allreduce_max(std::span<double> values) const;
  void allreduce_min(std::span<double> values) const;
  std::vector<std::uint64_t> allgather(std::uint64_t value) const;
  // Every rank's text, in rank order, on `root` (empty elsewhere).
  std::vector<std::string> gather(const std::string& text, int root) const;
  // True on every rank when `flag` is true on at least one.
  bool any(bool flag) const;
  // Throws InputError on every rank, naming the ranks that differ from rank 0, unless all pass the same value.
  void check_same(const std::string& what, std::uint64_t fingerprint) const;

  // Times every blocking call here with `detector` (null: none); `name` says in its message which ranks
  // these are ("the replicas of stage 1").
  void watch(HangDetector* detector, const std::string& name);
  HangDetector* hang_detector() const { return hang_; }
  // A wait to time, in a collective of all these ranks or for one of them (a rank of this communicator).
  HangDetector::Wait waiting(const std::string& what, HangDetector::LateRanks late = {}) const;
  HangDetector::Wait waiting_for(const std::string& what, int peer, const char* preposition = "from") const;
  // The rank in MPI_COMM_WORLD of this communicator's rank r, the one users see.
  int world_rank(int r) const;

 private:
  struct Adopt {};
  Communicator(MPI_Comm owned, Adopt);
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  HangDetector* hang_ = nullptr;
  std::string name_;
  std::string members_;  // "<name> (world ranks 0, 2, 4)", for the detector's messages
};

}  // namespace ddl
