#include "core/train/sharded_parameters.hpp"

#include <algorithm>
#include <utility>

#include "core/aligned_buffer.hpp"

namespace ddl {

ShardedParameters::ShardedParameters(ReplicaGroup& replicas, std::span<float> params, ReplicaGroup::Shard shard,
                                     bool prefetch)
    : replicas_(replicas), params_(params), shard_(shard), prefetch_(prefetch) {}

void ShardedParameters::before_layer(ParamRange now, ParamRange next) {
  if (kept_ == now) {
    kept_.reset();
  } else if (!whole_) {
    if (kept_) give_back(*std::exchange(kept_, std::nullopt));
    if (ahead_ && ahead_->range != now) {
      // Guessed wrong (another micro-batch's layer ran first): its values are let go once they have arrived.
      replicas_.await_parameters(ahead_->ticket);
      give_back(ahead_->range);
      ahead_.reset();
    }
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

void ShardedParameters::begin_step() {
  if (!whole_) return;
  whole_ = false;
  give_back({0, params_.size()});
}

void ShardedParameters::make_whole() {
  if (whole_) return;
  if (ahead_) replicas_.await_parameters(ahead_->ticket);
  ahead_.reset();
  kept_.reset();
  replicas_.all_gather(params_);
  whole_ = true;
}

// The range's values before and after this replica's shard; only whole blocks go, so values of the layers
// beside it (one gathered ahead) and of the shard stay.
void ShardedParameters::give_back(ParamRange range) {
  const std::size_t end = range.offset + range.count;
  if (range.offset < shard_.begin)
    release_pages(params_.subspan(range.offset, std::min(end, shard_.begin) - range.offset));
  if (end > shard_.end) {
    const std::size_t from = std::max(range.offset, shard_.end);
    release_pages(params_.subspan(from, end - from));
  }
}

}  // namespace ddl
