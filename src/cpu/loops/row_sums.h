// Row kernels' shared pieces (softmax, cross-entropy, layer_norm, rms_norm): how many rows a thread
// takes, row sums kept in kLanes interleaved partial results, so that the loops vectorise and a
// row's sum does not depend on how the rows are split between threads, and the norms' column sums
// over all rows (their parameter gradients), which do not depend on it either.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/loops/parallel.h"
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

// Note [norm parameter gradients]: layer_norm's dw and db and rms_norm's dw are sums over all
// rows. The rows are cut into blocks whose size depends only on the shape (at least a thread's
// grain, at most kMaxRowBlocks blocks); each block sums its rows in order into its own partial rows
// while they are in cache from the dx pass, and the partials are then added in block order in
// double. The result is therefore the same for every thread count, and the partials take at most
// kMaxRowBlocks * kParts * cols.
constexpr int64_t kMaxRowBlocks = 256;

// fill(r0, r1, part) runs rows [r0, r1) of one block, summing into part[kParts * cols] (zeroed);
// finish(c, sums) then gets sums[k] = the sum of part[k * cols + c] over the blocks, in block order.
template <class T, int kParts, class Fill, class Finish>
void row_block_column_sums(int64_t rows, int64_t cols, const Fill& fill, const Finish& finish) {
  const int64_t block_rows = std::max(row_grain(cols), (rows + kMaxRowBlocks - 1) / kMaxRowBlocks);
  const int64_t blocks = (rows + block_rows - 1) / block_rows;
  std::vector<T> partial(static_cast<size_t>(blocks * kParts * cols), T(0));
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t block = b0; block < b1; ++block) {
      const int64_t r0 = block * block_rows, r1 = std::min(rows, r0 + block_rows);
      fill(r0, r1, partial.data() + block * kParts * cols);
    }
  });
  parallel_for(0, cols, std::max<int64_t>(1, kGrainSize / blocks), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sums[kParts] = {};
      for (int64_t block = 0; block < blocks; ++block)
        for (int k = 0; k < kParts; ++k) sums[k] += static_cast<double>(partial[(block * kParts + k) * cols + c]);
      finish(c, sums);
    }
  });
}

}  // namespace tapegrad::cpu
