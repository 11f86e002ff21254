// The seeded Philox generator state: a key (the seed) and the next unused counter.
#include "tapegrad/core/generator.h"

namespace tapegrad {

Generator::Generator(uint64_t seed) : seed_(seed) {}

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

Generator::Draw Generator::reserve(uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  Draw draw{seed_, offset_};
  offset_ += count;
  return draw;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace tapegrad
