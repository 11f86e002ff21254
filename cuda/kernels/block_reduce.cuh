// Warp- and block-wide reductions shared by the reduce, softmax and cross-entropy kernels: shuffles
// within a warp, shared memory across the warps of a block. Every helper is an all-reduce (each
// calling thread gets the result) with a fixed combination order, so results do not change from
// run to run, and every thread of a row holds the same value afterwards.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"

namespace tapegrad::cuda_backend {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarpMask = 0xffffffffu;

// The shuffle of a value a reduction carries (float, double, int32, int64). Structs add an
// overload beside their definition.
template <class V>
__device__ __forceinline__ V shfl_xor(V value, int lane_mask) {
  return __shfl_xor_sync(kFullWarpMask, value, lane_mask);
}

// All 32 lanes call; each gets combine() over the warp. The butterfly pairs lane l with l ^ mask,
// so a commutative combine leaves the same result in every lane.
template <class V, class Combine>
__device__ __forceinline__ V warp_all_reduce(V value, Combine combine) {
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) value = combine(value, shfl_xor(value, mask));
  return value;
}

// All threads of a block with blockDim.y == 1 and blockDim.x a multiple of 32 call; each gets
// combine() over the block. `shared` holds one value per warp and may be reused by the next call.
template <class V, class Combine>
__device__ V block_all_reduce(V value, Combine combine, V* shared) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  value = warp_all_reduce(value, combine);
  __syncthreads();  // every thread has read the previous call's results out of `shared`
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = shared[0];
  for (int w = 1; w < warps; ++w) value = combine(value, shared[w]);  // same order in every thread
  return value;
}

// Rows of a [rows, cols] problem, kThreadsPerRow threads per row: a warp per row (eight rows per
// 256-thread block) for short rows, the whole block per row for long ones. Blocks walk the rows
// with a grid-stride loop; in the block-per-row case the loop is uniform across the block, so
// block_all_reduce's barriers are safe. Launch with block() and grid(rows).
template <int kThreadsPerRow>
struct RowTiling {
  static_assert(kThreadsPerRow % kWarpSize == 0 && kBlockThreads % kThreadsPerRow == 0, "whole warps per row");
  static constexpr int kThreads = kThreadsPerRow;
  static constexpr int kRowsPerBlock = kBlockThreads / kThreadsPerRow;
  // One value per warp of a row, for all_reduce.
  static constexpr int kSharedSlots = kThreadsPerRow / kWarpSize;

  static dim3 block() { return dim3(kThreadsPerRow, kRowsPerBlock); }
  static int grid(int64_t rows) { return grid_for(rows, kRowsPerBlock); }

  static __device__ __forceinline__ int64_t first_row() {
    return blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.y;
  }
  static __device__ __forceinline__ int64_t row_step() { return static_cast<int64_t>(gridDim.x) * kRowsPerBlock; }
  static __device__ __forceinline__ int lane() { return threadIdx.x; }

  // All threads of the row call; each gets combine() over the row.
  template <class V, class Combine>
  static __device__ __forceinline__ V all_reduce(V value, Combine combine, V* shared) {
    if constexpr (kThreadsPerRow == kWarpSize) {
      (void)shared;
      return warp_all_reduce(value, combine);
    } else {
      return block_all_reduce(value, combine, shared);
    }
  }
};

// Rows up to this long get a warp each; longer ones a block.
constexpr int64_t kWarpRowLimit = 1024;

}  // namespace tapegrad::cuda_backend
