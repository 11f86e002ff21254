// The caching device allocator.
//
// Note [caching allocator]: cudaMalloc and cudaFree are slow and cudaFree synchronises the device,
// so freed memory is kept and reused, as PyTorch's CUDACachingAllocator does.
//  - A *segment* is one cudaMalloc. It is cut into *blocks* that form a doubly linked list in
//    address order; a freed block merges with free neighbours, so a segment whose tensors are all
//    gone is one free block again and can be released by empty_cache().
//  - Sizes: requests round up to 512 bytes. Up to 1 MiB ("small") they come from 2 MiB segments;
//    larger ones from 20 MiB segments (requests under 10 MiB) or from a segment of exactly the
//    request rounded up to 2 MiB. A block is split when the rest is worth keeping: at least 512
//    bytes in the small pool, more than 1 MiB in the large one.
//  - Streams: a segment belongs to the stream it was allocated for, and its free blocks are handed
//    out only for that stream. Work on one stream runs in order, so a block freed while kernels
//    that use it are still queued can be given to the next allocation on that stream at once: its
//    new owner's kernels are queued after them. A block also used on another stream
//    (record_stream) is held back until an event recorded on that stream at free time completes.
//  - Free blocks sit in one ordered set per pool keyed by (stream, size, address): the best fit is
//    one lower_bound away.
//  - Out of memory: release every unused segment of the device and retry once, then throw.
//
// Note [graph pools]: a CUDA graph replays the addresses it captured, so the memory its captured
// kernels use must stay reserved for it. While a capture runs (begin_allocate_to_pool), allocations
// on the capturing stream come from the graph's private pool: segments of their own, tagged with
// the pool id, whose blocks go back to that pool when freed and are handed out only to captures
// into the same pool. The pool lives until its last graph releases it; its segments are then
// cudaFree'd as soon as they are wholly free (at release, or by empty_cache()). During a capture
// nothing may wait for the device: events of other-stream uses are not queried but deferred until
// no capture runs, a segment is never released to satisfy an allocation (out of memory throws), and
// cudaMalloc runs in relaxed capture mode (it is not captured, and the graph keeps its memory).
#include "runtime/caching_allocator.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "profiler/record.h"
#include "runtime/cuda_check.h"
#include "runtime/runtime.h"
#include "tapegrad/cuda/counters.h"

namespace tapegrad::cuda_backend {

namespace {

constexpr size_t kMinBlockSize = 512;        // every block size is a multiple of this
constexpr size_t kSmallSize = 1 << 20;       // requests up to this use the small pool
constexpr size_t kSmallBuffer = 2 << 20;     // segment size of the small pool
constexpr size_t kMinLargeAlloc = 10 << 20;  // large requests below this share kLargeBuffer segments
constexpr size_t kLargeBuffer = 20 << 20;
constexpr size_t kRoundLarge = 2 << 20;  // bigger segments are the request rounded to this
// Beyond any device, and small enough that rounding can never overflow size_t.
constexpr size_t kMaxRequest = size_t(1) << 60;

struct Block {
  Block(void* p, size_t s, cudaStream_t st, bool sm, uint64_t pl = 0)
      : ptr(p), size(s), stream(st), small(sm), pool(pl) {}
  void* ptr;
  size_t size;          // a multiple of kMinBlockSize
  cudaStream_t stream;  // the stream of its segment
  bool small;           // which pool its segment belongs to
  uint64_t pool;        // 0, or the private graph pool of its segment (Note [graph pools])
  bool allocated = false;
  int pending_events = 0;  // events that must complete before the block is free again
  Block* prev = nullptr;   // neighbours within the segment, in address order
  Block* next = nullptr;
  std::vector<cudaStream_t> other_streams;  // from record_stream, while allocated
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->pool != b->pool) return a->pool < b->pool;
    if (a->stream != b->stream) return reinterpret_cast<uintptr_t>(a->stream) < reinterpret_cast<uintptr_t>(b->stream);
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};
using BlockPool = std::set<Block*, BlockLess>;

size_t round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

// The block cache of one device. Every member function takes the mutex; the caller has made the
// device current where a CUDA call needs it (allocate, empty_cache).
class DeviceCache {
 public:
  explicit DeviceCache(int device) : device_(device) {}

  Block* malloc(size_t nbytes, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (nbytes > kMaxRequest) {
      ++stats_.num_ooms;
      throw_out_of_memory(nbytes);
    }
    if (captures_.empty()) process_events();  // no event queries during a capture
    const size_t size = round_size(nbytes);
    BlockPool& pool = size <= kSmallSize ? small_ : large_;
    const uint64_t private_pool = pool_for(stream);
    Block* block = take_free_block(pool, private_pool, stream, size);
    if (block == nullptr) block = new_segment(pool, private_pool, stream, size, nbytes);
    if (should_split(*block, size)) {
      auto* rest =
          new Block(static_cast<char*>(block->ptr) + size, block->size - size, stream, block->small, block->pool);
      rest->prev = block;
      rest->next = block->next;
      if (block->next != nullptr) block->next->prev = rest;
      block->next = rest;
      block->size = size;
      pool.insert(rest);
    }
    block->allocated = true;
    active_[block->ptr] = block;
    ++stats_.num_allocations;
    stats_.allocated_bytes += block->size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    return block;
  }

  // The deleter of every block: must not throw.
  void free(Block* block) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    block->allocated = false;
    active_.erase(block->ptr);
    stats_.allocated_bytes -= block->size;
    if (!block->other_streams.empty()) {
      if (!captures_.empty()) {
        // Its events could not be queried until the capture ends: hold it back until then.
        ++block->pending_events;
        deferred_.push_back(block);
        return;
      }
      mark_uses_on_other_streams(block);
    }
    if (block->pending_events == 0) return_to_pool(block);
  }

  void begin_allocate_to_pool(uint64_t id, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++private_pools_[id].users;  // a new pool, or one more graph sharing it
    captures_.emplace_back(id, stream);
  }

  void end_allocate_to_pool(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = captures_.begin(); it != captures_.end(); ++it)
      if (it->first == id) {
        captures_.erase(it);
        break;
      }
    if (!captures_.empty()) return;
    // Blocks freed during the capture with uses on other streams get their events now.
    std::vector<Block*> deferred;
    deferred.swap(deferred_);
    for (Block* block : deferred) {
      --block->pending_events;
      mark_uses_on_other_streams(block);
      if (block->pending_events == 0) return_to_pool(block);
    }
  }

  void release_pool(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = private_pools_.find(id);
    if (it == private_pools_.end() || --it->second.users > 0) return;
    private_pools_.erase(it);
    if (captures_.empty()) release_free_segments([&](const Block* b) { return b->pool == id; });
  }

  void record_stream(const void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = active_.find(const_cast<void*>(ptr));
    if (it == active_.end()) return;
    Block* block = it->second;
    if (stream == block->stream) return;
    for (cudaStream_t s : block->other_streams)
      if (s == stream) return;
    block->other_streams.push_back(stream);
  }

  cuda::MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak_stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_segments();
  }

 private:
  static bool should_split(const Block& block, size_t size) {
    size_t rest = block.size - size;
    return block.small ? rest >= kMinBlockSize : rest > kSmallSize;
  }

  // The private pool an allocation on `stream` comes from now: the capture's, or 0.
  uint64_t pool_for(cudaStream_t stream) const {
    for (const auto& [id, capturing] : captures_)
      if (capturing == stream) return id;
    return 0;
  }

  // The smallest free block of (private pool, stream) holding `size` bytes, removed from the pool;
  // or nullptr.
  static Block* take_free_block(BlockPool& pool, uint64_t private_pool, cudaStream_t stream, size_t size) {
    Block key(nullptr, size, stream, false, private_pool);
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream || (*it)->pool != private_pool) return nullptr;
    Block* block = *it;
    pool.erase(it);
    return block;
  }

  Block* new_segment(BlockPool& pool, uint64_t private_pool, cudaStream_t stream, size_t size, size_t nbytes) {
    const size_t bytes = segment_size(size);
    void* ptr = nullptr;
    ++stats_.num_device_mallocs;
    cudaError_t status = malloc_maybe_capturing(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation && captures_.empty()) {
      (void)cudaGetLastError();
      ++stats_.num_alloc_retries;
      release_cached_segments();
      ++stats_.num_device_mallocs;
      status = cudaMalloc(&ptr, bytes);
    }
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      if (status != cudaErrorMemoryAllocation) throw_cuda_error(status, "cudaMalloc", "cuda allocator");
      ++stats_.num_ooms;
      throw_out_of_memory(nbytes);
    }
    stats_.reserved_bytes += bytes;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    return new Block(ptr, bytes, stream, &pool == &small_, private_pool);
  }

  // cudaMalloc is not captured, and the graph keeps what it gets: safe during capture, so it runs
  // in relaxed mode there (a global-mode capture would otherwise refuse it).
  cudaError_t malloc_maybe_capturing(void** ptr, size_t bytes) {
    if (captures_.empty()) return cudaMalloc(ptr, bytes);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaError_t status = cudaThreadExchangeStreamCaptureMode(&mode);
    if (status != cudaSuccess) return status;
    status = cudaMalloc(ptr, bytes);
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) (void)cudaGetLastError();
    return status;
  }

  [[noreturn]] void throw_out_of_memory(size_t nbytes) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    detail::throw_error(detail::str_cat(
        "CUDA out of memory: cannot allocate ", nbytes, " bytes (", format_bytes(nbytes), ") on cuda:", device_,
        "; the device has ", free_bytes, " bytes free of ", total_bytes, " bytes total (", format_bytes(free_bytes),
        " free of ", format_bytes(total_bytes), "); tapegrad's allocator holds ", stats_.allocated_bytes,
        " bytes in tensors and ", stats_.reserved_bytes, " bytes reserved"));
  }

  // At free time, queues an event on each other stream that used the block; the block becomes
  // free when they all complete (process_events). If that fails, waiting for the whole device is
  // the safe answer.
  void mark_uses_on_other_streams(Block* block) noexcept {
    NoThrowDeviceGuard guard(device_);
    bool all_marked = true;
    for (cudaStream_t stream : block->other_streams) {
      cudaEvent_t event = nullptr;
      if (!spare_events_.empty()) {
        event = spare_events_.back();
        spare_events_.pop_back();
      } else if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        all_marked = false;
        continue;
      }
      if (cudaEventRecord(event, stream) != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaEventDestroy(event);
        all_marked = false;
        continue;
      }
      try {
        pending_.emplace_back(event, block);
      } catch (...) {
        (void)cudaEventDestroy(event);
        all_marked = false;
        continue;
      }
      ++block->pending_events;
    }
    block->other_streams.clear();
    if (!all_marked) {
      cuda::note_host_sync();
      if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
    }
  }

  // Frees the blocks whose events have all completed.
  void process_events() {
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      cudaError_t status = cudaEventQuery(pending_[i].first);
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();
        pending_[kept++] = pending_[i];
        continue;
      }
      if (status != cudaSuccess) {
        // Keep the rest for later; this one is dropped with its block held back for good.
        for (size_t j = i + 1; j < pending_.size(); ++j) pending_[kept++] = pending_[j];
        pending_.resize(kept);
        throw_cuda_error(status, "cudaEventQuery", "cuda allocator");
      }
      spare_events_.push_back(pending_[i].first);
      Block* block = pending_[i].second;
      if (--block->pending_events == 0) return_to_pool(block);
    }
    pending_.resize(kept);
  }

  void return_to_pool(Block* block) {
    BlockPool& pool = block->small ? small_ : large_;
    merge(block, block->prev, pool);
    merge(block, block->next, pool);
    pool.insert(block);
  }

  // Absorbs `neighbour` into `block` (not in a pool) when the neighbour is free.
  static void merge(Block* block, Block* neighbour, BlockPool& pool) {
    if (neighbour == nullptr || neighbour->allocated || neighbour->pending_events > 0) return;
    pool.erase(neighbour);
    if (block->prev == neighbour) {
      block->ptr = neighbour->ptr;
      block->prev = neighbour->prev;
      if (block->prev != nullptr) block->prev->next = block;
    } else {
      block->next = neighbour->next;
      if (block->next != nullptr) block->next->prev = block;
    }
    block->size += neighbour->size;
    delete neighbour;
  }

  // cudaFree of every segment that is one free block, except those of live graph pools. Waits for
  // pending events first so blocks held back for other streams can go too. Never during a capture.
  void release_cached_segments() {
    if (!captures_.empty()) return;
    for (auto& [event, block] : pending_) {
      (void)block;
      cuda::note_host_sync();
      TG_CUDA_CHECK(cudaEventSynchronize(event), "cuda allocator");
    }
    process_events();
    release_free_segments([&](const Block* b) { return b->pool == 0 || private_pools_.count(b->pool) == 0; });
  }

  template <class Which>
  void release_free_segments(const Which& which) {
    for (BlockPool* pool : {&small_, &large_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* block = *it;
        if (block->prev != nullptr || block->next != nullptr || !which(block)) {
          ++it;
          continue;
        }
        ++stats_.num_device_frees;
        cuda::note_host_sync();  // cudaFree waits for the device
        TG_CUDA_CHECK(cudaFree(block->ptr), "cuda allocator: releasing cached memory");
        stats_.reserved_bytes -= block->size;
        it = pool->erase(it);
        delete block;
      }
    }
  }

  std::mutex mutex_;
  const int device_;
  BlockPool small_, large_;
  std::unordered_map<void*, Block*> active_;
  std::vector<std::pair<cudaEvent_t, Block*>> pending_;
  std::vector<cudaEvent_t> spare_events_;
  cuda::MemoryStats stats_;
  struct PrivatePool {
    int users = 0;  // graphs holding it
  };
  std::unordered_map<uint64_t, PrivatePool> private_pools_;  // live ones
  std::vector<std::pair<uint64_t, cudaStream_t>> captures_;  // running captures: (pool, stream)
  std::vector<Block*> deferred_;                             // freed during a capture, uses elsewhere
};

// One cache per device, created on first use and never destroyed: tensors freed during static
// destruction still find their cache.
std::vector<DeviceCache*>& device_caches() {
  static auto* caches = [] {
    auto* list = new std::vector<DeviceCache*>();
    for (int d = 0; d < cuda::device_count(); ++d) list->push_back(new DeviceCache(d));
    return list;
  }();
  return *caches;
}

// Note [bypassing the cache]: with TAPEGRAD_CUDA_CACHING_ALLOCATOR=0 every tensor gets its own
// cudaMalloc and gives it back with cudaFree (which waits for the device). Slow, but a memory
// checker then sees each tensor's bounds: compute-sanitizer on a GPU and AddressSanitizer in the
// emulation build cannot see an access that runs past a tensor into the rest of a cached segment.
// The statistics count nothing in this mode.
DataPtr allocate_uncached(size_t nbytes, int device) {
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, nbytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    detail::throw_error(detail::str_cat("CUDA out of memory: cannot allocate ", nbytes, " bytes (",
                                        format_bytes(nbytes), ") on cuda:", device, "; the device has ", free_bytes,
                                        " bytes free of ", total_bytes, " bytes total (", format_bytes(free_bytes),
                                        " free of ", format_bytes(total_bytes), "); the caching allocator is off"));
  }
  // The profiler counts these blocks too (TAPEGRAD_CUDA_CACHING_ALLOCATOR=0 must not hide memory).
  const int64_t size = static_cast<int64_t>(nbytes);
  if (profiler::detail::active()) profiler::detail::note_memory(Device(DeviceKind::CUDA, device), size, ptr);
  return DataPtr{ptr, [device, size](void* p) {
                   if (profiler::detail::active())
                     profiler::detail::note_memory(Device(DeviceKind::CUDA, device), -size, p);
                   NoThrowDeviceGuard guard(device);
                   cuda::note_host_sync();  // cudaFree waits for the device
                   if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
                 }};
}

}  // namespace

bool CachingAllocator::enabled() {
  static const bool on = [] {
    const char* value = std::getenv("TAPEGRAD_CUDA_CACHING_ALLOCATOR");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return on;
}

DataPtr CachingAllocator::allocate(size_t nbytes, Device device) {
  TG_CHECK(device.is_cuda(), "cuda allocator: asked for memory on ", device);
  if (nbytes == 0) return DataPtr{nullptr, nullptr};
  const int index = resolve_device(device.index(), "cuda allocator");
  cuda::DeviceGuard guard(index);
  if (!enabled()) return allocate_uncached(nbytes, index);
  DeviceCache* cache = device_caches()[static_cast<size_t>(index)];
  Block* block = cache->malloc(nbytes, current_stream(index));
  // The profiler's memory accounting counts what the statistics count: whole blocks.
  const int64_t size = static_cast<int64_t>(block->size);
  if (profiler::detail::active()) profiler::detail::note_memory(Device(DeviceKind::CUDA, index), size, block->ptr);
  return DataPtr{block->ptr, [cache, block, index, size](void* ptr) {
                   cache->free(block);
                   if (profiler::detail::active())
                     profiler::detail::note_memory(Device(DeviceKind::CUDA, index), -size, ptr);
                 }};
}

cuda::MemoryStats CachingAllocator::stats(int device) {
  if (!cuda::is_available()) return {};
  return device_caches()[static_cast<size_t>(resolve_device(device, "cuda::memory_stats"))]->stats();
}

void CachingAllocator::reset_peak_stats(int device) {
  if (!cuda::is_available()) return;
  device_caches()[static_cast<size_t>(resolve_device(device, "cuda::reset_peak_memory_stats"))]->reset_peak_stats();
}

void CachingAllocator::empty_cache() {
  if (!cuda::is_available()) return;
  auto& caches = device_caches();
  for (size_t d = 0; d < caches.size(); ++d) {
    cuda::DeviceGuard guard(static_cast<int>(d));
    caches[d]->empty_cache();
  }
}

void CachingAllocator::record_stream(const void* ptr, int device, cudaStream_t stream) {
  if (ptr == nullptr) return;
  device_caches()[static_cast<size_t>(resolve_device(device, "cuda::record_stream"))]->record_stream(ptr, stream);
}

void CachingAllocator::begin_allocate_to_pool(int device, uint64_t pool, cudaStream_t stream) {
  device_caches()[static_cast<size_t>(resolve_device(device, "cuda::Graph"))]->begin_allocate_to_pool(pool, stream);
}

void CachingAllocator::end_allocate_to_pool(int device, uint64_t pool) {
  device_caches()[static_cast<size_t>(resolve_device(device, "cuda::Graph"))]->end_allocate_to_pool(pool);
}

void CachingAllocator::release_pool(int device, uint64_t pool) {
  cuda::DeviceGuard guard(device);
  device_caches()[static_cast<size_t>(resolve_device(device, "cuda::Graph"))]->release_pool(pool);
}

CachingAllocator& caching_allocator() {
  static auto* allocator = new CachingAllocator();
  return *allocator;
}

}  // namespace tapegrad::cuda_backend
