#include "comm/replica_check.hpp"

#include "core/checksum.hpp"

namespace ddl {
namespace {

std::uint64_t checksum_of(const NamedValues& t) {
  return Checksum().add(t.floats).add(t.words).value();
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() > 1 ? "ranks " : "rank ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

}  // namespace

std::string replica_difference(const Communicator& replicas, const std::vector<NamedValues>& tensors) {
  std::vector<std::uint64_t> sums;
  Checksum all;
  for (const auto& t : tensors) all.add(sums.emplace_back(checksum_of(t)));
  const auto totals = replicas.allgather(all.value());
  std::vector<int> differ;
  for (std::size_t r = 1; r < totals.size(); ++r)
    if (totals[r] != totals[0]) differ.push_back(replicas.world_rank(static_cast<int>(r)));
  if (differ.empty()) return "";
  // Every rank saw the mismatch, so all take part in naming the tensors.
  std::string first;
  int more = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const auto each = replicas.allgather(sums[t]);
    bool same = true;
    for (auto s : each) same = same && s == each[0];
    if (same) continue;
    if (first.empty())
      first = tensors[t].name;
    else
      ++more;
  }
  return ranks_text(differ) + (differ.size() > 1 ? " differ" : " differs") + " from rank " +
         std::to_string(replicas.world_rank(0)) + " in " + first +
         (more ? " (and " + std::to_string(more) + " more tensor" + (more > 1 ? "s)" : ")") : "");
}

}  // namespace ddl
