// The CPU allocator: 64-byte aligned host memory with a cache of freed blocks, so that a training
// loop, which frees and asks again for the same sizes every step, stops paying for fresh memory
// (large blocks come from mmap, and every fresh page faults on first touch) once a step has run.
//
// Requests are rounded up to a size class (multiples of 64 bytes up to 1 KiB, then four classes
// per power of two, so at most 25% is unused) and a freed block goes to its class's free list,
// from which the next request of that class is served (last freed first, while still in the CPU
// caches). The cache is bounded: a freed block that would take it over the limit goes back to the
// system instead, and empty_cache() gives back every cached block. Memory owned by live tensors
// stays put. Thread-safe.
//
// Environment, read once when the allocator is first used:
//   TAPEGRAD_CPU_CACHING_ALLOCATOR=0   no caching: every block goes back to the system when freed
//                                      (the default under AddressSanitizer, which cannot see a
//                                      use after free inside a cached block);
//   TAPEGRAD_CPU_CACHE_LIMIT_MB=N      the cache limit (default kDefaultCacheLimitBytes);
//   TAPEGRAD_CPU_HUGE_PAGES=0          blocks of 2 MiB and more (mappings of their own, 2 MiB
//                                      aligned, each block a few pages in) are not offered to
//                                      the kernel for transparent huge pages (Note [huge pages
//                                      for large blocks] in caching_allocator.cpp; under
//                                      AddressSanitizer no block is).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tapegrad/core/storage.h"

namespace tapegrad::cpu {

constexpr size_t kDefaultCacheLimitBytes = size_t{1} << 30;

struct CpuMemoryStats {
  size_t allocated_bytes = 0;       // in blocks owned by tensors (rounded sizes)
  size_t cached_bytes = 0;          // in freed blocks kept for reuse
  size_t peak_allocated_bytes = 0;  // highest allocated_bytes since start or reset_peak_cpu_memory_stats()
  size_t peak_cached_bytes = 0;
  size_t cache_limit_bytes = 0;
  int64_t num_allocations = 0;    // requests served (nonzero sizes)
  int64_t num_cache_hits = 0;     // of those, served from the cache
  int64_t num_system_allocs = 0;  // blocks obtained from the system, failed attempts included
  int64_t num_system_frees = 0;   // blocks given back to the system
  bool caching_enabled = false;
};

// The CPU backend's allocator (the kernel table's), a process-wide singleton that is never
// destroyed, so tensors freed during static destruction still find it.
Allocator& cpu_allocator();

CpuMemoryStats cpu_memory_stats();
void reset_peak_cpu_memory_stats();
// Gives every cached block back to the system.
void cpu_empty_cache();
// Caching off: empties the cache, and blocks freed from then on go back to the system.
void set_cpu_caching_enabled(bool enabled);
// Whether blocks of 2 MiB and more made from now on are marked MADV_HUGEPAGE (the default, unless
// TAPEGRAD_CPU_HUGE_PAGES=0); cached blocks keep what they were made with.
void set_cpu_huge_pages(bool enabled);
// Trims the cache to `bytes` at once and keeps it there.
void set_cpu_cache_limit(size_t bytes);

// The size a request of `nbytes` (> 0) is rounded up to; exposed for tests.
size_t cpu_allocation_size(size_t nbytes);

}  // namespace tapegrad::cpu
