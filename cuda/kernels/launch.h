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

#include "runtime/cuda_check.h"
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
// The launch's dynamic shared memory as a `type*` (one extern array per translation unit).
#ifndef TG_DYNAMIC_SHARED
#define TG_DYNAMIC_SHARED(type, name)                                 \
  extern __shared__ __align__(16) unsigned char tg_dynamic_shared_[]; \
  type* name = reinterpret_cast<type*>(tg_dynamic_shared_)
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

// A cooperative launch (every block resident at once, cooperative_groups' grid.sync() allowed):
//   cudaError_t status = TG_LAUNCH_COOPERATIVE_KERNEL(grid, block, dynamic_shared_bytes, stream,
//                                                     kernel<Args...>)(arguments...);
// The caller checks the returned status (cudaErrorCooperativeLaunchTooLarge when the grid cannot
// be resident at once). Grid-wide sync needs no -rdc since CUDA 11.0.
#ifdef TG_EMU_LAUNCH_COOPERATIVE_KERNEL
// Counted like TG_LAUNCH_KERNEL; the parentheses keep the launcher one postfix expression.
#undef TG_LAUNCH_COOPERATIVE_KERNEL
#define TG_LAUNCH_COOPERATIVE_KERNEL(grid, block, dynamic_shared_bytes, stream, ...) \
  (::tapegrad::cuda::note_launch(),                                                  \
   TG_EMU_LAUNCH_COOPERATIVE_KERNEL(grid, block, dynamic_shared_bytes, stream, __VA_ARGS__))
#else
namespace tapegrad::cuda_backend {
template <class Kernel>
class CooperativeLaunch;
template <class... Params>
class CooperativeLaunch<void (*)(Params...)> {
 public:
  CooperativeLaunch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream)
      : kernel_(kernel), grid_(grid), block_(block), shared_(dynamic_shared_bytes), stream_(stream) {}
  // The arguments converted to the kernel's parameter types here, since the runtime reads them
  // through untyped pointers.
  cudaError_t operator()(Params... args) const {
    void* argv[] = {static_cast<void*>(&args)..., nullptr};
    ::tapegrad::cuda::note_launch();
    return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel_), grid_, block_, argv, shared_, stream_);
  }

 private:
  void (*kernel_)(Params...);
  dim3 grid_, block_;
  size_t shared_;
  cudaStream_t stream_;
};
}  // namespace tapegrad::cuda_backend
#define TG_LAUNCH_COOPERATIVE_KERNEL(grid, block, dynamic_shared_bytes, stream, ...)                                   \
  ::tapegrad::cuda_backend::CooperativeLaunch<decltype(&__VA_ARGS__)>(&__VA_ARGS__, grid, block, dynamic_shared_bytes, \
                                                                      stream)
#endif

// for (i in [0, n)) with a grid-stride loop; i is int64_t.
#define TG_GRID_STRIDE_LOOP(i, n)                                                        \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
