// Launch helpers shared by every CUDA kernel file: the stream kernels run on, a grid-stride
// configuration, and the index type. Kernels launch on current_stream() so that user streams
// (StreamGuard) and the caching allocator's per-stream reuse stay consistent.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda_check.h"

namespace tapegrad::cuda_backend {

// The stream of the calling thread on the current device (the legacy default stream unless a
// StreamGuard is active).
cudaStream_t current_stream();

constexpr int kBlockThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the device, never more than needed.
inline int grid_for(int64_t n, int threads = kBlockThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535 * 8)));
}

}  // namespace tapegrad::cuda_backend

// for (i in [0, n)) with a grid-stride loop; i is int64_t.
#define TG_GRID_STRIDE_LOOP(i, n)                                                                     \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n);              \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
