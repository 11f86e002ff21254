// The caching device allocator: one instance per process, one block cache per device. See
// tapegrad/cuda/memory.h for what users see and Note [caching allocator] in the .cpp for how.
// Shared by memory.cpp (which registers it), graph.cpp (graph pools) and the cuBLAS and cuDNN
// workspaces (device_allocator()).
#pragma once

#include <cuda_runtime.h>

#include "tapegrad/core/storage.h"
#include "tapegrad/cuda/memory.h"

namespace tapegrad::cuda_backend {

class CachingAllocator : public Allocator {
 public:
  // Memory on `device` (a CUDA device) for work on the calling thread's current stream of that
  // device. Throws tapegrad::Error when out of memory (after freeing the cache and retrying once).
  DataPtr allocate(size_t nbytes, Device device) override;

  // False when TAPEGRAD_CUDA_CACHING_ALLOCATOR=0 (Note [bypassing the cache]).
  static bool enabled();

  cuda::MemoryStats stats(int device);
  void reset_peak_stats(int device);
  void empty_cache();  // every device
  // See cuda::record_stream; `ptr` is the base of a block of `device` (others are ignored).
  void record_stream(const void* ptr, int device, cudaStream_t stream);

  // Graph capture (Note [graph pools]): while a capture on `stream` runs, its allocations come from
  // the private pool `pool` (created at the first begin, shared by later begins with the same id).
  void begin_allocate_to_pool(int device, uint64_t pool, cudaStream_t stream);
  void end_allocate_to_pool(int device, uint64_t pool);
  // One user of the pool (a graph) is gone; with none left its free memory is released, and the
  // rest as the tensors holding it are freed (by empty_cache()).
  void release_pool(int device, uint64_t pool);
};

CachingAllocator& caching_allocator();

// The device allocator (memory.cpp): the caching allocator, as the kernel table and the storages
// see it. Declared here because the families that allocate outside the kernel table (cuBLAS
// workspaces, cuDNN's) share it.
Allocator& device_allocator();

}  // namespace tapegrad::cuda_backend
