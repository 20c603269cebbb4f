#include "core/train/sharded_parameters.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/aligned_buffer.hpp"

namespace ddl {

ShardedParameters::ShardedParameters(ReplicaGroup& replicas, std::span<float> params, IndexRange shard,
                                     bool prefetch)
    : replicas_(replicas), params_(params), shard_(shard), prefetch_(prefetch) {}

void ShardedParameters::before_layer(ParamRange now, ParamRange next) {
  if (kept_ == now) {
    kept_.reset();
  } else if (!whole_) {
    if (kept_) give_back(*std::exchange(kept_, std::nullopt));
    // Guessed wrong (another micro-batch's layer ran first): its values are let go once they have arrived.
    if (ahead_ && ahead_->range != now) drop_ahead();
    const std::uint64_t ticket = ahead_ ? ahead_->ticket : replicas_.fetch_parameters(params_, now.offset, now.count);
    ahead_.reset();
    replicas_.await_parameters(ticket);
  }
  keep_current_ = next == now;
  if (prefetch_ && !whole_ && next.count > 0 && !keep_current_)
    ahead_ = Fetch{next, replicas_.fetch_parameters(params_, next.offset, next.count)};
}

void ShardedParameters::after_layer(ParamRange now) {
  if (whole_) return;
  if (keep_current_)
    kept_ = now;
  else
    give_back(now);
  keep_current_ = false;
}

// Every step ends on a layer that names none next, so nothing gathered outlives it; were one left, it would
// hold the values from before the update.
void ShardedParameters::begin_step() {
  if (ahead_) drop_ahead();
  if (kept_) give_back(*std::exchange(kept_, std::nullopt));
  if (!whole_) return;
  whole_ = false;
  give_back({0, params_.size()});
}

void ShardedParameters::drop_ahead() {
  replicas_.await_parameters(ahead_->ticket);
  give_back(ahead_->range);
  ahead_.reset();
}

void ShardedParameters::make_whole() {
  if (whole_) return;
  if (ahead_) replicas_.await_parameters(ahead_->ticket);
  ahead_.reset();
  kept_.reset();
  replicas_.all_gather(params_);
  whole_ = true;
}

// The range's values outside this replica's shard, with the whole 2 MB blocks they share with the layers beside
// them (whose values are gathered again before they run), but not a block that holds values of the shard, of the
// layer gathered ahead (it may be arriving now) or of the layer kept for its backward.
void ShardedParameters::give_back(ParamRange range) {
  constexpr std::size_t kBlock = kReleaseBlockBytes;
  const auto address = [&](std::size_t i) { return reinterpret_cast<std::uintptr_t>(params_.data() + i); };
  std::size_t begin = range.offset - std::min(range.offset, address(range.offset) % kBlock / sizeof(float));
  std::size_t end = range.offset + range.count;
  end = std::min(params_.size(), end + (kBlock - address(end) % kBlock) % kBlock / sizeof(float));
  const ParamRange held[] = {kept_.value_or(ParamRange{}), ahead_ ? ahead_->range : ParamRange{},
                             {shard_.begin, shard_.end - shard_.begin}};
  for (const ParamRange& h : held) {
    if (h.count == 0) continue;
    if (h.offset + h.count <= range.offset) begin = std::max(begin, h.offset + h.count);  // rounded up past its block
    if (h.offset >= range.offset + range.count) end = std::min(end, h.offset);
  }
  if (begin < end) release_pages_outside(params_, begin, end, shard_.begin, shard_.end);
}

}  // namespace ddl
