// The seeded Philox generator state: a key (the seed) and the next unused counter.
#include "tapegrad/core/generator.h"

#include "core/generator_replay.h"

namespace tapegrad {

Generator::Generator(uint64_t seed) : id_(detail::new_generator_id()), seed_(seed) {}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seed_;
}

void Generator::set_state(uint64_t seed, uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = offset;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_;
}

// Inside a checkpoint's recomputation the draw is the forward's, and the state is not touched
// (Note [generator replay]).
Generator::Draw Generator::reserve(uint64_t count) {
  Draw draw{0, 0};
  if (!detail::GeneratorReplay::replayed(id_, count, draw.seed, draw.offset)) {
    std::lock_guard<std::mutex> lock(mutex_);
    draw = Draw{seed_, offset_};
    offset_ += count;
  }
  detail::note_generator_draw(id_, count, draw.seed, draw.offset);
  return draw;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace tapegrad
