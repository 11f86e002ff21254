// Small helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/random_values.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad::testing {

// Values of any tensor as doubles, in logical order.
inline std::vector<double> values(const Tensor& t) {
  return t.to(kFloat64).tolist<double>();
}

inline void expect_close(const Tensor& actual, const std::vector<double>& expected, double tol = 1e-6) {
  std::vector<double> got = values(actual);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "at element " << i;
}

inline void expect_close(const Tensor& actual, const Tensor& expected, double tol = 1e-6) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  expect_close(actual, values(expected), tol);
}

// Runs `body`, expecting a tapegrad::Error whose message contains every one of `fragments`.
template <class F>
void expect_error(F&& body, const std::vector<std::string>& fragments) {
  try {
    body();
    ADD_FAILURE() << "expected a tapegrad::Error";
  } catch (const Error& e) {
    std::string message = e.what();
    for (const std::string& f : fragments)
      EXPECT_NE(message.find(f), std::string::npos) << "message '" << message << "' lacks '" << f << "'";
  }
}

// Runs `f` and returns the message of the tapegrad::Error it throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A random f64 leaf that requires grad, for gradchecks.
inline Tensor leaf(const Shape& shape, uint64_t seed = 1, double low = -1.0, double high = 1.0) {
  return uniform(shape, kFloat64, seed, low, high).requires_grad_(true);
}

// True when the CUDA device is the CPU emulator of the -DTAPEGRAD_CUDA=EMULATE build (see
// docs/testing.md). It runs every CUDA thread as a fiber, so a tensor of a million rows costs
// seconds per kernel: tests shrink the sizes that exist only to load a real GPU, keeping every
// code path (warp- or block-per-row, sliced reductions, several launches) in reach.
inline bool cuda_is_emulated() {
  static const bool emulated =
      cuda::is_available() && cuda::get_device_properties(0).name.find("emulator") != std::string::npos;
  return emulated;
}

// `real` on a GPU, `emulated` in the emulation build.
inline int64_t gpu_size(int64_t real, int64_t emulated) {
  return cuda_is_emulated() ? emulated : real;
}

}  // namespace tapegrad::testing
