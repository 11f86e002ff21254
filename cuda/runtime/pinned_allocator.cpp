// The caching pinned host allocator.
//
// Note [pinned blocks]: cudaHostAlloc and cudaFreeHost are slow (they map pages for the device and
// synchronise), so freed pinned blocks are cached by size class (powers of two, at least 512
// bytes) and reused, as PyTorch's CachingHostAllocator does. A copy from pinned memory to the
// device is asynchronous: the host may free the source tensor while the copy is still queued. So
// each async copy first calls record_use(), which notes the stream on the block; when the block is
// freed, an event is recorded on every such stream, and the block is handed out again only after
// all of those events have completed (checked, without blocking, on each allocation).
#include "runtime/pinned_allocator.h"

#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/runtime.h"
#include "tapegrad/cuda/counters.h"

namespace tapegrad::cuda_backend {

namespace {

constexpr size_t kMinHostBlock = 512;
constexpr size_t kMaxHostRequest = size_t(1) << 62;  // so the power-of-two rounding cannot overflow

struct HostBlock {
  HostBlock(void* p, size_t s) : ptr(p), size(s) {}
  void* ptr;
  size_t size;  // the size class
  bool allocated = false;
  int pending_events = 0;
  std::vector<std::pair<cudaStream_t, int>> uses;  // (stream, device) of async copies while allocated
};

struct PendingEvent {
  cudaEvent_t event;
  int device;
  HostBlock* block;
};

size_t size_class(size_t nbytes) {
  size_t size = kMinHostBlock;
  while (size < nbytes) size <<= 1;
  return size;
}

class HostCache {
 public:
  HostBlock* malloc(size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    TG_CHECK(nbytes <= kMaxHostRequest, "pin_memory: cannot allocate ", nbytes, " bytes of pinned host memory");
    process_events();
    const size_t size = size_class(nbytes);
    HostBlock* block = nullptr;
    std::vector<HostBlock*>& cached = free_[size];
    if (!cached.empty()) {
      block = cached.back();
      cached.pop_back();
    } else {
      block = host_alloc(size, nbytes);
    }
    block->allocated = true;
    stats_.allocated_bytes += block->size;
    return block;
  }

  // The deleter of every pinned block: must not throw.
  void free(HostBlock* block) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    block->allocated = false;
    stats_.allocated_bytes -= block->size;
    for (const auto& [stream, device] : block->uses) mark_use(block, stream, device);
    block->uses.clear();
    if (block->pending_events > 0) {
      ++stats_.blocks_awaiting_copies;
    } else {
      cache(block);
    }
  }

  bool contains(const void* ptr, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    return find(ptr, nbytes) != nullptr;
  }

  bool record_use(const void* ptr, size_t nbytes, cudaStream_t stream, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    HostBlock* block = find(ptr, nbytes);
    if (block == nullptr) return false;
    for (const auto& use : block->uses)
      if (use.first == stream && use.second == device) return true;
    block->uses.emplace_back(stream, device);
    return true;
  }

  cuda::HostMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    process_events();
    release_cached_blocks();
  }

 private:
  // The live block holding [ptr, ptr + nbytes), or nullptr.
  HostBlock* find(const void* ptr, size_t nbytes) {
    if (ptr == nullptr || blocks_.empty()) return nullptr;
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    auto it = blocks_.upper_bound(address);
    if (it == blocks_.begin()) return nullptr;
    HostBlock* block = std::prev(it)->second;
    const auto base = reinterpret_cast<uintptr_t>(block->ptr);
    if (!block->allocated || address - base >= block->size || nbytes > block->size - (address - base)) return nullptr;
    return block;
  }

  HostBlock* host_alloc(size_t size, size_t nbytes) {
    void* ptr = nullptr;
    ++stats_.num_host_allocs;
    cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached_blocks();
      ++stats_.num_host_allocs;
      status = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    }
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      detail::throw_error(detail::str_cat("pin_memory: cannot allocate ", nbytes, " bytes (", format_bytes(nbytes),
                                          ") of pinned host memory: cudaHostAlloc failed: ", cudaGetErrorName(status),
                                          " (", cudaGetErrorString(status), ")"));
    }
    auto* block = new HostBlock(ptr, size);
    blocks_[reinterpret_cast<uintptr_t>(ptr)] = block;
    stats_.reserved_bytes += size;
    return block;
  }

  // Queues an event on `stream` behind the copies that read `block`. If that is impossible (e.g.
  // the stream is gone), waiting for its whole device is the safe answer.
  void mark_use(HostBlock* block, cudaStream_t stream, int device) noexcept {
    NoThrowDeviceGuard guard(device);
    cudaEvent_t event = nullptr;
    std::vector<cudaEvent_t>& spare = spare_events_[device];
    if (!spare.empty()) {
      event = spare.back();
      spare.pop_back();
    } else if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError();
      event = nullptr;
    }
    if (event != nullptr && cudaEventRecord(event, stream) == cudaSuccess) {
      try {
        pending_.push_back(PendingEvent{event, device, block});
        ++block->pending_events;
        return;
      } catch (...) {
      }
    }
    (void)cudaGetLastError();
    if (event != nullptr) (void)cudaEventDestroy(event);
    cuda::note_host_sync();
    if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
  }

  void cache(HostBlock* block) noexcept {
    try {
      free_[block->size].push_back(block);
    } catch (...) {
      // Out of host memory for the free list: the block stays pinned but is never reused.
    }
  }

  // Moves blocks whose events have all completed to the free lists.
  void process_events() {
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      cudaError_t status = cudaEventQuery(pending_[i].event);
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();
        pending_[kept++] = pending_[i];
        continue;
      }
      if (status != cudaSuccess) {
        for (size_t j = i + 1; j < pending_.size(); ++j) pending_[kept++] = pending_[j];
        pending_.resize(kept);
        throw_cuda_error(status, "cudaEventQuery", "pinned host allocator");
      }
      spare_events_[pending_[i].device].push_back(pending_[i].event);
      HostBlock* block = pending_[i].block;
      if (--block->pending_events == 0) {
        --stats_.blocks_awaiting_copies;
        cache(block);
      }
    }
    pending_.resize(kept);
  }

  void release_cached_blocks() {
    for (auto& [size, blocks] : free_) {
      (void)size;
      while (!blocks.empty()) {
        HostBlock* block = blocks.back();
        ++stats_.num_host_frees;
        cuda::note_host_sync();  // cudaFreeHost synchronises
        TG_CUDA_CHECK(cudaFreeHost(block->ptr), "pinned host allocator: releasing cached memory");
        blocks.pop_back();
        blocks_.erase(reinterpret_cast<uintptr_t>(block->ptr));
        stats_.reserved_bytes -= block->size;
        delete block;
      }
    }
  }

  std::mutex mutex_;
  std::map<uintptr_t, HostBlock*> blocks_;                    // every block, by address
  std::unordered_map<size_t, std::vector<HostBlock*>> free_;  // reusable blocks by size class
  std::vector<PendingEvent> pending_;
  std::unordered_map<int, std::vector<cudaEvent_t>> spare_events_;  // by device
  cuda::HostMemoryStats stats_;
};

// Never destroyed: pinned tensors freed during static destruction still find it.
HostCache& host_cache() {
  static auto* cache = new HostCache();
  return *cache;
}

}  // namespace

DataPtr PinnedHostAllocator::allocate(size_t nbytes, Device device) {
  TG_CHECK(device.is_cpu(), "pin_memory: pinned memory is host memory, but it was asked for on ", device);
  TG_CHECK(cuda::is_available(),
           "pin_memory: pinned host memory needs a CUDA device, and none is available (device_count() == 0)");
  HostCache* cache = &host_cache();
  HostBlock* block = cache->malloc(nbytes);
  return DataPtr{block->ptr, [cache, block](void*) { cache->free(block); }};
}

bool PinnedHostAllocator::contains(const void* ptr, size_t nbytes) {
  return host_cache().contains(ptr, nbytes);
}

bool PinnedHostAllocator::record_use(const void* ptr, size_t nbytes, cudaStream_t stream, int device) {
  return host_cache().record_use(ptr, nbytes, stream, device);
}

cuda::HostMemoryStats PinnedHostAllocator::stats() {
  return host_cache().stats();
}

void PinnedHostAllocator::empty_cache() {
  host_cache().empty_cache();
}

PinnedHostAllocator& pinned_host_allocator() {
  static auto* allocator = new PinnedHostAllocator();
  return *allocator;
}

}  // namespace tapegrad::cuda_backend
