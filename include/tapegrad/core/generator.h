// Generator: seeded, counter-based random numbers (Philox 4x32-10).
//
// Element i of a random tensor is a pure function of (seed, offset + i), so a seed gives the same
// tensor whatever the thread count, and the same on the GPU backend.
#pragma once

#include <cstdint>
#include <mutex>

namespace tapegrad {

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ULL);
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  // The whole state is (seed, offset): saving both and restoring them with set_state resumes the
  // exact stream of numbers, e.g. from a checkpoint.
  void set_state(uint64_t seed, uint64_t offset);
  // Reserves `count` counters and returns the seed and first counter to use. Thread-safe. Inside
  // the recomputation of a checkpoint() it returns the forward pass's draw instead and leaves the
  // state alone.
  struct Draw {
    uint64_t seed;
    uint64_t offset;
  };
  Draw reserve(uint64_t count);

 private:
  const uint64_t id_;  // names the generator to checkpoint()'s replay (src/core/generator_replay.h)
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when none is passed (a documented, thread-safe singleton).
Generator& default_generator();
// Re-seeds the default generator, like torch::manual_seed.
void manual_seed(uint64_t seed);

}  // namespace tapegrad
