// Launch helpers shared by every CUDA kernel file: the stream kernels run on, a grid-stride
// configuration, and the index type. Kernels launch on current_stream() so that user streams
// (StreamGuard) and the caching allocator's per-stream reuse stay consistent.
//
// Every launch goes through TG_LAUNCH_KERNEL and every static shared array through
// TG_SHARED_ARRAY. Here they are CUDA's own syntax; the emulation build (-DTAPEGRAD_CUDA=EMULATE,
// tests/cuda_emulator) defines TG_EMU_LAUNCH_KERNEL and TG_SHARED_ARRAY first, in its
// cuda_runtime.h, to run the same kernels on the host with CUDA's rules checked.
//
//   TG_LAUNCH_KERNEL(grid, block, dynamic_shared_bytes, stream, kernel<Args...>)(arguments...);
//   TG_SHARED_ARRAY(float, partials, 32);  // __shared__ float partials[32];
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda_check.h"
#include "tapegrad/cuda/counters.h"
#include "tapegrad/cuda/device.h"

// Each launch is counted (tapegrad/cuda/counters.h) before it is made; the expansion is
// `note_launch(), kernel<<<...>>>(arguments)`, one expression statement.
#ifdef TG_EMU_LAUNCH_KERNEL
#undef TG_LAUNCH_KERNEL
#define TG_LAUNCH_KERNEL(grid, block, dynamic_shared_bytes, stream, ...) \
  ::tapegrad::cuda::note_launch(), TG_EMU_LAUNCH_KERNEL(grid, block, dynamic_shared_bytes, stream, __VA_ARGS__)
#else
#define TG_LAUNCH_KERNEL(grid, block, dynamic_shared_bytes, stream, ...) \
  ::tapegrad::cuda::note_launch(), __VA_ARGS__<<<grid, block, dynamic_shared_bytes, stream>>>
#endif
#ifndef TG_SHARED_ARRAY
#define TG_SHARED_ARRAY(type, name, count) __shared__ type name[count]
#endif

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
#define TG_GRID_STRIDE_LOOP(i, n)                                                        \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
