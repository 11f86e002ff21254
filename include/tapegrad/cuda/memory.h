// GPU memory: the caching device allocator's statistics and controls, and pinned host memory.
//
// Device memory. Tensors on cuda:N get their memory from a caching allocator for device N (the
// device of the tensor, whatever device is current). Requests are rounded up to 512 bytes; those
// up to 1 MiB are carved from 2 MiB segments, larger ones from segments of 20 MiB (requests under
// 10 MiB) or of the request rounded up to 2 MiB, and a block larger than needed is split with the
// rest kept cached. A freed block goes back to a free list of its (device, stream) and is reused
// by later requests on that stream, so once a training step has run, the next ones call neither
// cudaMalloc nor cudaFree. When cudaMalloc fails, the allocator frees its unused cached segments
// and retries once; if that fails too it throws a tapegrad::Error naming the requested size and
// the device's free and total memory. The allocator is thread-safe.
//
// Pinned host memory. Tensor::pin_memory() copies a CPU tensor into page-locked memory from a
// caching host allocator (cudaHostAlloc, sizes rounded up to a power of two). Copying a pinned
// tensor to the GPU is asynchronous on the current stream: the call returns before the transfer
// has finished, so do not write into the pinned tensor until the stream has passed the copy
// (stream.synchronize() or an Event). Freeing it early is safe: a freed pinned block is reused only
// after every stream that copied from it has passed the copy. DataLoaderOptions::pin_memory builds
// batches in pinned memory.
//
// Without a device (or in a build without CUDA) the statistics are all zero, empty_cache() and
// reset_peak_memory_stats() do nothing, and pinning throws tapegrad::Error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tapegrad/core/storage.h"

namespace tapegrad {
class Tensor;
}

namespace tapegrad::cuda {

class Stream;

// One device's caching allocator. Byte counts are of rounded blocks (what the allocator holds for
// the tensors), not of the sizes asked for.
struct MemoryStats {
  size_t allocated_bytes = 0;       // in blocks currently owned by tensors
  size_t reserved_bytes = 0;        // obtained from cudaMalloc and not yet released (allocated + cached)
  size_t peak_allocated_bytes = 0;  // highest allocated_bytes since start or reset_peak_memory_stats()
  size_t peak_reserved_bytes = 0;
  int64_t num_allocations = 0;     // requests served (cached or not)
  int64_t num_device_mallocs = 0;  // cudaMalloc calls, failed ones included
  int64_t num_device_frees = 0;    // cudaFree calls (empty_cache, or freeing the cache to retry)
  int64_t num_alloc_retries = 0;   // times a failed cudaMalloc made the allocator free its cache and retry
  int64_t num_ooms = 0;            // requests that failed even after the retry
};

// Statistics of `device`'s allocator (-1: the current device; all zero when no device is available).
MemoryStats memory_stats(int device = -1);
size_t memory_allocated(int device = -1);      // memory_stats(device).allocated_bytes
size_t memory_reserved(int device = -1);       // memory_stats(device).reserved_bytes
size_t max_memory_allocated(int device = -1);  // memory_stats(device).peak_allocated_bytes
// Sets the peaks of `device` (-1: current) to the current values.
void reset_peak_memory_stats(int device = -1);
// Returns every cached segment that no tensor uses to the driver (cudaFree), on every device.
// Memory owned by live tensors stays. Useful before handing the GPU to another library or process.
void empty_cache();

// False when the environment sets TAPEGRAD_CUDA_CACHING_ALLOCATOR=0: then every tensor gets its
// own cudaMalloc and cudaFree (slow; for memory checkers such as compute-sanitizer, which cannot see
// accesses that stay inside a cached segment), and the statistics above stay zero.
bool caching_allocator_enabled();

// Marks that `tensor` (on a CUDA device) is used by work queued on `stream`, a stream other than
// the one its memory was allocated on. When the tensor is freed, its block is reused only after
// `stream` has passed that work. Memory not from the caching allocator is ignored.
void record_stream(const Tensor& tensor, const Stream& stream);

// Queues a copy of `src` (a contiguous tensor on a CUDA device) into `dst` (a contiguous CPU tensor
// in pinned memory, of src's dtype and element count) on the current stream of src's device, and
// returns without waiting, as PyTorch's dst.copy_(src, non_blocking=True) into pinned memory: dst
// holds the values once that stream has passed the copy (record an Event after the call and wait
// for it; until then neither read nor write dst). Freeing dst early is safe: its block is reused
// only after the stream has passed the copy. Throws tapegrad::Error for any other pair of tensors.
// (Tensor::copy_ and Tensor::to from a device wait for the copy instead.)
void copy_to_host_async(const Tensor& dst, const Tensor& src);

// The pinned host allocator.
struct HostMemoryStats {
  size_t allocated_bytes = 0;          // in pinned blocks owned by tensors
  size_t reserved_bytes = 0;           // obtained from cudaHostAlloc and not yet released
  int64_t num_host_allocs = 0;         // cudaHostAlloc calls, failed ones included
  int64_t num_host_frees = 0;          // cudaFreeHost calls
  int64_t blocks_awaiting_copies = 0;  // freed blocks not reusable yet: a copy from them may be in flight
};
HostMemoryStats host_memory_stats();
// Frees the cached pinned blocks that no tensor uses and no copy still reads (cudaFreeHost).
void empty_host_cache();
// The pinned host allocator itself, for building CPU Storage in pinned memory (Device kCPU).
// Throws tapegrad::Error when no CUDA device is available.
Allocator& host_allocator();
// True when `ptr` points into a block of the pinned host allocator.
bool is_pinned(const void* ptr);

}  // namespace tapegrad::cuda
