// The caching pinned (page-locked) host allocator behind Tensor::pin_memory(). See
// tapegrad/cuda/memory.h for what users see and Note [pinned blocks] in the .cpp for how.
// Shared by memory.cpp (staged copies) and device_checks.cpp (the error records' host copies).
#pragma once

#include <cuda_runtime.h>

#include "tapegrad/core/storage.h"
#include "tapegrad/cuda/memory.h"

namespace tapegrad::cuda_backend {

class PinnedHostAllocator : public Allocator {
 public:
  // Page-locked host memory (device must be the CPU). Never returns nullptr, even for 0 bytes, so
  // that every pinned tensor can be recognised as pinned. Throws when no CUDA device is available
  // or when cudaHostAlloc fails after freeing the cache.
  DataPtr allocate(size_t nbytes, Device device) override;

  // Whether [ptr, ptr + nbytes) lies inside one live pinned block.
  bool contains(const void* ptr, size_t nbytes);
  // Call before queueing an asynchronous copy that reads [ptr, ptr + nbytes) on `stream` of
  // `device`: returns false (and records nothing) if the range is not pinned memory; otherwise
  // notes the stream so that, once the block is freed, it is reused only after `stream` has passed
  // the copy.
  bool record_use(const void* ptr, size_t nbytes, cudaStream_t stream, int device);

  cuda::HostMemoryStats stats();
  void empty_cache();
};

PinnedHostAllocator& pinned_host_allocator();

}  // namespace tapegrad::cuda_backend
