// Storage that is needed only for a while in each step comes from this pool and goes back to it: a
// layer's input gradient lives from its backward until the layer before it has consumed it, its output
// from its forward until the backwards that read it have run. Single-threaded: layers run on the main
// thread only.
//
// Training asks for the same sizes in the same order every step, so the pool learns a step's requests
// once its owner marks the steps (begin_step): when two steps of one kind have asked alike, each request
// gets a fixed place (an offset) in one arena, apart from the places of the requests that either step
// shows alive at the same time as it. Places are found largest request first, each at the lowest offset
// free of its overlapping requests, so the arena is about as large as the most bytes alive at once
// (VGG16 in bf16: 783 MB, that most to the megabyte; one buffer per group of requests never alive
// together, sized for the largest, held 947 MB, and the smallest free buffer for each request, as the
// pool did before, up to 1,146 MB). Every later step of that kind is served from the arena without
// allocating. Until a kind is learned, and for a
// request that the learned steps did not make or whose place is still taken (a step that differs: a
// last, smaller batch), a request gets an allocation of its own, released when it is given back: such
// steps cost time (fresh pages), not memory.
//
// A pool whose owner never marks steps (a probe of a few passes, a test) serves each request from the
// smallest free buffer large enough.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/aligned_buffer.hpp"

namespace ddl {

class BufferPool {
 public:
  // A step begins. `kind` tells apart steps that ask differently (training, evaluation); each kind's
  // requests are learned on their own. A step of another kind than the last releases the last kind's
  // arena once nothing in it is out: training's and evaluation's arenas are not held together.
  void begin_step(int kind);
  // A buffer of at least `bytes`. Contents are unspecified.
  AlignedBuffer<std::byte> take(std::size_t bytes);
  void give(AlignedBuffer<std::byte> buffer);
  // How many buffers the pool has allocated so far (an arena counts as one; a learned step allocates none).
  std::size_t allocations() const { return allocations_; }
  // The bytes of the arena learned for a kind of step, about the most bytes alive at once in it (0 until
  // the kind is learned).
  std::size_t arena_bytes(int kind) const {
    const auto k = kinds_.find(kind);
    return k == kinds_.end() ? 0 : k->second.plan.arena_bytes;
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  using Arena = std::shared_ptr<AlignedBuffer<std::byte>>;
  // One request of a step: its size, and when it was taken and given back on the pool's clock (a tick
  // per take and give); `given` is kNone, later than any tick, while the buffer is out.
  struct Use {
    std::size_t bytes, taken, given;
  };
  // The places learned for one kind of step: the step's i-th request, when it asks for sizes[i] bytes,
  // is served at offsets[i] in an arena of arena_bytes, allocated when first needed.
  struct Plan {
    std::vector<std::size_t> sizes, offsets;
    std::size_t arena_bytes = 0;
    Arena arena;
  };
  struct Record {
    std::size_t step = kNone;  // the pool's count of steps begun, when this one began
    std::vector<Use> uses;
  };
  struct Kind {
    Record before_last, last, current;  // this kind's last steps
    Plan plan;
  };
  // A buffer that is out: where its request is recorded, and for a place in an arena, the arena (kept
  // alive while the buffer is out, even when a new plan replaced it) and the bytes it covers there.
  struct Out {
    int kind;
    std::size_t step, use;
    Arena arena;
    std::size_t begin, end;
  };

  AlignedBuffer<std::byte> allocate(std::size_t bytes);
  Arena new_arena(std::size_t bytes);
  AlignedBuffer<std::byte> take_best_fit(std::size_t bytes);
  bool place_is_free(const Arena& arena, std::size_t begin, std::size_t end) const;
  Use* use_of(const Out& out);
  static void learn(Kind& kind);

  std::unordered_map<int, Kind> kinds_;
  int current_ = 0;          // the kind of the step under way
  bool stepping_ = false;    // begin_step has been called
  std::size_t steps_ = 0;    // steps begun
  std::size_t clock_ = 0;
  std::unordered_map<const std::byte*, Out> out_;
  std::vector<AlignedBuffer<std::byte>> best_fit_free_;  // until a step is marked
  std::size_t allocations_ = 0;
};

}  // namespace ddl
