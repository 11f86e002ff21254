// The one elementwise comparison behind the CPU/CUDA parity tests (and other closeness checks on
// tensors of any device and dtype): |got - want| <= atol + rtol * |want|, NaN matching NaN and an
// infinity only itself; it reports one failure with the count and the first few misses, not one per element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tapegrad/tapegrad.h"

namespace tapegrad::testing {

struct Tol {
  double rtol = 0, atol = 0;
};
constexpr Tol kExact{0, 0};

// Both undefined passes (an absent gradient on both sides); one undefined fails.
inline void expect_allclose(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.defined(), want.defined()) << what << ": one side is undefined";
  if (!want.defined()) return;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  std::vector<double> g = got.detach().cpu().to(kFloat64).tolist<double>();
  std::vector<double> w = want.detach().cpu().to(kFloat64).tolist<double>();
  int64_t misses = 0;
  std::ostringstream first;  // the first few misses, in the one failure reported
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                      (std::isfinite(w[i]) && std::fabs(g[i] - w[i]) <= tol.atol + tol.rtol * std::fabs(w[i]));
    if (!same && ++misses <= 5) first << "\n  element " << i << " is " << g[i] << ", expected " << w[i];
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << g.size() << " elements differ" << first.str();
}

// A CUDA result against the CPU reference: same shape and dtype, values within `tol`.
inline void expect_parity(const Tensor& on_cuda, const Tensor& on_cpu, Tol tol, const std::string& what) {
  ASSERT_TRUE(on_cuda.device().is_cuda()) << what;
  ASSERT_TRUE(on_cpu.device().is_cpu()) << what;
  ASSERT_EQ(on_cuda.dtype(), on_cpu.dtype()) << what;
  expect_allclose(on_cuda, on_cpu, tol, what);
}

}  // namespace tapegrad::testing
