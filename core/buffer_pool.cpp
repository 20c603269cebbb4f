#include "core/buffer_pool.hpp"

#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <numeric>
#include <utility>

namespace ddl {

void BufferPool::begin_step(int kind) {
  if (!stepping_) best_fit_free_.clear();
  if (stepping_ && kind != current_) kinds_[current_].plan.arena.reset();  // freed once no buffer of it is out
  stepping_ = true;
  current_ = kind;
  Kind& k = kinds_[kind];
  k.before_last = std::move(k.last);
  k.last = std::move(k.current);
  k.current = Record{steps_++, {}};
  const auto sizes_of = [](const Record& r) {
    std::vector<std::size_t> sizes;
    for (const Use& u : r.uses) sizes.push_back(u.bytes);
    return sizes;
  };
  const std::vector<std::size_t> last = sizes_of(k.last);
  if (!last.empty() && last == sizes_of(k.before_last) && last != k.plan.sizes) learn(k);
}

AlignedBuffer<std::byte> BufferPool::take(std::size_t bytes) {
  if (bytes == 0) return {};
  if (!stepping_) return take_best_fit(bytes);
  Kind& k = kinds_[current_];
  const std::size_t i = k.current.uses.size();
  k.current.uses.push_back({bytes, ++clock_, kNone});
  Plan& plan = k.plan;
  if (i < plan.sizes.size() && plan.sizes[i] == bytes) {
    if (!plan.arena) plan.arena = new_arena(plan.arena_bytes);
    const std::size_t begin = plan.offsets[i], end = begin + bytes;
    // Taken where this step differs from the learned ones (a request of theirs is still out).
    if (place_is_free(plan.arena, begin, end)) {
      ASAN_UNPOISON_MEMORY_REGION(plan.arena->data() + begin, bytes);
      auto buffer = AlignedBuffer<std::byte>::view(plan.arena->data() + begin, bytes);
      out_[buffer.data()] = {current_, k.current.step, i, plan.arena, begin, end};
      return buffer;
    }
  }
  AlignedBuffer<std::byte> buffer = allocate(bytes);
  out_[buffer.data()] = {current_, k.current.step, i, nullptr, 0, 0};
  return buffer;
}

void BufferPool::give(AlignedBuffer<std::byte> buffer) {
  if (buffer.size() == 0) return;
  if (!stepping_) {
    best_fit_free_.push_back(std::move(buffer));
    return;
  }
  const auto it = out_.find(buffer.data());
  if (it == out_.end()) return;  // taken before steps were marked: released here
  if (Use* use = use_of(it->second)) use->given = ++clock_;
  if (it->second.arena) ASAN_POISON_MEMORY_REGION(buffer.data(), buffer.size());
  out_.erase(it);
  // An allocation of its own is released as `buffer` goes out of scope; a place in an arena is free again.
}

bool BufferPool::place_is_free(const Arena& arena, std::size_t begin, std::size_t end) const {
  return std::none_of(out_.begin(), out_.end(), [&](const auto& entry) {
    const Out& o = entry.second;
    return o.arena == arena && o.begin < end && begin < o.end;
  });
}

AlignedBuffer<std::byte> BufferPool::allocate(std::size_t bytes) {
  ++allocations_;
  return AlignedBuffer<std::byte>(bytes);
}

// Under AddressSanitizer an arena's free places are poisoned, so that a read or a write through a buffer
// already given back is reported, as it would be for an allocation of its own that was freed (a place's
// padding up to the allocation unit stays poisoned while it is out); elsewhere these macros do nothing.
// An arena is unpoisoned whole before it is freed, so that no poison outlives it.
BufferPool::Arena BufferPool::new_arena(std::size_t bytes) {
  auto* arena = new AlignedBuffer<std::byte>(allocate(bytes));
  ASAN_POISON_MEMORY_REGION(arena->data(), bytes);
  return Arena(arena, [](AlignedBuffer<std::byte>* a) {
    ASAN_UNPOISON_MEMORY_REGION(a->data(), a->size());
    delete a;
  });
}

// The smallest free buffer of at least `bytes`, or a new one. When none is large enough, the free ones
// (all smaller) are released first: a model's gradients grow from layer to layer during backward, and
// keeping every size would hold their sum, not their peak.
AlignedBuffer<std::byte> BufferPool::take_best_fit(std::size_t bytes) {
  auto best = best_fit_free_.end();
  for (auto it = best_fit_free_.begin(); it != best_fit_free_.end(); ++it)
    if (it->size() >= bytes && (best == best_fit_free_.end() || it->size() < best->size())) best = it;
  if (best == best_fit_free_.end()) {
    best_fit_free_.clear();
    return allocate(bytes);
  }
  AlignedBuffer<std::byte> buffer = std::move(*best);
  best_fit_free_.erase(best);
  return buffer;
}

BufferPool::Use* BufferPool::use_of(const Out& out) {
  Kind& k = kinds_[out.kind];
  for (Record* r : {&k.current, &k.last, &k.before_last})
    if (r->step == out.step) return out.use < r->uses.size() ? &r->uses[out.use] : nullptr;
  return nullptr;
}

// Places from the last two steps, which asked alike: two requests may overlap in the arena when neither
// step shows them alive together, within a step or across the two (a buffer taken in one step and given
// back in the next). A buffer still out counts as alive from then on.
void BufferPool::learn(Kind& k) {
  const std::vector<Use>&a = k.before_last.uses, &b = k.last.uses;
  const auto overlap = [](const Use& u, const Use& v) { return u.taken < v.given && v.taken < u.given; };
  const auto together = [&](std::size_t i, std::size_t j) {
    return overlap(a[i], a[j]) || overlap(a[i], b[j]) || overlap(b[i], a[j]) || overlap(b[i], b[j]);
  };
  std::vector<std::size_t> order(a.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t i, std::size_t j) { return a[i].bytes > a[j].bytes; });
  Plan plan;
  plan.offsets.assign(a.size(), 0);
  std::vector<std::size_t> placed;
  std::vector<std::pair<std::size_t, std::size_t>> taken;  // [begin, end) of the placed requests alive with this one
  for (std::size_t i : order) {
    taken.clear();
    for (std::size_t j : placed)
      if (together(i, j)) taken.emplace_back(plan.offsets[j], plan.offsets[j] + aligned_size(a[j].bytes));
    std::sort(taken.begin(), taken.end());
    std::size_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + a[i].bytes <= begin) break;
      offset = std::max(offset, end);
    }
    plan.offsets[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + aligned_size(a[i].bytes));
    placed.push_back(i);
  }
  for (const Use& u : a) plan.sizes.push_back(u.bytes);
  k.plan = std::move(plan);
}

}  // namespace ddl
