// Row kernels' shared pieces (softmax, cross-entropy, layer_norm, rms_norm): how many rows a thread
// takes, and row sums kept in kLanes interleaved partial results, so that the loops vectorise and a
// row's sum does not depend on how the rows are split between threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/loops/vec_math.h"

namespace tapegrad::cpu {

// Rows per thread: a row costs a few vectorised passes (~1 ns per element in float), so a thread's
// share should be at least 16384 elements for a parallel region to pay off.
inline int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
}

constexpr int64_t kLanes = 16;

// The sum of f(c) over [0, n) in kLanes interleaved partial sums, then those in order.
template <class T, class F>
TG_ALWAYS_INLINE T lane_sum(int64_t n, const F& f) {
  T part[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) part[k] += f(c + k);
  for (int64_t k = 0; c + k < n; ++k) part[k] += f(c + k);
  T total = 0;
  for (int64_t k = 0; k < kLanes; ++k) total += part[k];
  return total;
}

// The sums of f(c) and g(c) over [0, n) in one pass, each as lane_sum forms it.
template <class T, class F, class G>
TG_ALWAYS_INLINE void lane_sums(int64_t n, const F& f, const G& g, T& f_total, T& g_total) {
  T fp[kLanes] = {}, gp[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) {
      fp[k] += f(c + k);
      gp[k] += g(c + k);
    }
  for (int64_t k = 0; c + k < n; ++k) {
    fp[k] += f(c + k);
    gp[k] += g(c + k);
  }
  f_total = 0;
  g_total = 0;
  for (int64_t k = 0; k < kLanes; ++k) {
    f_total += fp[k];
    g_total += gp[k];
  }
}

}  // namespace tapegrad::cpu
