// The seeded random inputs of the tests: tensors from tapegrad's own generator, and plain vectors
// from the standard library's (for references that must not depend on tapegrad at all).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tapegrad/tapegrad.h"

namespace tapegrad::testing {

// Uniform on [low, high) as a CPU tensor of `dtype`: f64 draws of a Generator seeded with `seed`,
// scaled, then converted (so every dtype of one seed holds the same numbers, rounded).
inline Tensor uniform(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0, double high = 1.0) {
  Generator g(seed);
  return add(mul(rand(shape, TensorOptions(kFloat64), &g), high - low), low).to(dtype);
}

// The type T itself, kept out of template argument deduction.
template <class T>
struct Same {
  using type = T;
};

// `count` values uniform on [low, high) from std::mt19937 seeded with `seed` (drawn in T, double
// unless asked: uniform_values<float>).
template <class T = double>
std::vector<T> uniform_values(size_t count, uint32_t seed, typename Same<T>::type low = T(-1),
                              typename Same<T>::type high = T(1)) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<T> dist(low, high);
  std::vector<T> v(count);
  for (T& x : v) x = dist(rng);
  return v;
}

}  // namespace tapegrad::testing
