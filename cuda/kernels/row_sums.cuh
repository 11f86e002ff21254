// Row kernels' shared pieces (softmax, cross-entropy, layer_norm, rms_norm): the combines of their
// row reductions, the choice between a warp and a block per row, and the two-stage column sums of
// the norms' parameter gradients. The CPU backend's counterpart is cpu/loops/row_sums.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/block_reduce.cuh"
#include "math/binary.h"

namespace tapegrad::cuda_backend {

struct SumOf {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return a + b;
  }
};

// NaN-propagating max (a NaN anywhere in a row makes the whole row NaN, as on the CPU).
struct MaxOf {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return math::MaximumOp::apply(a, b);
  }
};

// Calls launch(RowTiling<kWarpSize>{}) for rows up to kWarpRowLimit long, launch(RowTiling<kBlockThreads>{})
// for longer ones; the callee launches its kernel instantiated for decltype(tiling)::kThreads.
template <class Launch>
void with_row_tiling(int64_t cols, const Launch& launch) {
  if (cols <= kWarpRowLimit)
    launch(RowTiling<kWarpSize>{});
  else
    launch(RowTiling<kBlockThreads>{});
}

// Column sums over all rows (the norms' weight and bias gradients) with no atomics, so results
// repeat run to run. Stage one: block (kColTile, kRowStripes) covers kColTile columns of the row
// slice blockIdx.y; thread (c, k) sums rows k, k + kRowStripes, ... of the slice in column c, and
// the stripes are added in order into the slice's partial sum. Stage two adds the slices'
// partials in slice order.
constexpr int kColTile = 32;
constexpr int kRowStripes = 8;

struct ColumnSlices {
  int64_t count = 1;       // row slices
  int64_t slice_rows = 1;  // rows per slice (the last may have fewer)
  dim3 grid;               // stage one's grid, with block dim3(kColTile, kRowStripes)
};

// Enough blocks to fill the device when the columns are few, at least 128 rows per slice, a count
// that depends on the shape alone, and no empty slice at the end.
inline ColumnSlices column_slices(int64_t rows, int64_t cols) {
  const int64_t col_tiles = (cols + kColTile - 1) / kColTile;
  const int64_t by_device = std::max<int64_t>(1, 1024 / col_tiles);
  const int64_t by_work = std::max<int64_t>(1, rows / 128);
  ColumnSlices s;
  s.count = std::min<int64_t>({by_device, by_work, 65535});
  s.slice_rows = (rows + s.count - 1) / s.count;
  s.count = (rows + s.slice_rows - 1) / s.slice_rows;
  s.grid = dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(s.count));
  return s;
}

// Stage one's column and rows for the calling thread: rows first, first + kRowStripes, ... < end.
struct StripeRows {
  int64_t col, first, end;
};
__device__ __forceinline__ StripeRows stripe_rows(int64_t rows, int64_t slice_rows) {
  const int64_t r0 = blockIdx.y * slice_rows;
  return {blockIdx.x * static_cast<int64_t>(kColTile) + threadIdx.x, r0 + threadIdx.y,
          r0 + slice_rows < rows ? r0 + slice_rows : rows};
}

// Stage one's slice sum of column threadIdx.x from `stripe` (kRowStripes x kColTile, shared), in
// stripe order; call after a barrier that follows every thread's write of its stripe.
template <class C>
__device__ __forceinline__ C stripe_total(const C* stripe) {
  C total = 0;
  for (int k = 0; k < kRowStripes; ++k) total += stripe[k * kColTile + threadIdx.x];
  return total;
}

}  // namespace tapegrad::cuda_backend
