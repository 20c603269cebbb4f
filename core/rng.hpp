// A small, portable pseudo-random generator (xoshiro256**, seeded through splitmix64). Used instead of
// <random> distributions because those differ between standard libraries, and ddl promises the same
// bits for the same --seed everywhere. Its state is four words, saved in checkpoints.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace ddl {

class Rng {
 public:
  using State = std::array<std::uint64_t, 4>;

  explicit Rng(std::uint64_t seed = 0) {
    for (auto& s : state_) {
      seed += 0x9e3779b97f4a7c15ULL;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      s = z ^ (z >> 31);
    }
  }
  // A generator for a derived stream, e.g. (seed, epoch): independent of how far others have advanced.
  static Rng derived(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0) {
    return Rng(seed * 0x100000001b3ULL ^ (a + 1) * 0x9e3779b97f4a7c15ULL ^ (b + 7) * 0xc2b2ae3d27d4eb4fULL);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 24 random bits: exact in float.
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias below 2^-32 for n < 2^32).
  std::uint64_t below(std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  // Standard normal by Box-Muller; one draw per call keeps the state easy to reason about.
  float normal() {
    double u1 = (static_cast<double>(next() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  const State& state() const { return state_; }
  void set_state(const State& s) { state_ = s; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  State state_{};
};

}  // namespace ddl
