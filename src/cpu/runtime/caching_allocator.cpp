// The CPU caching allocator (see caching_allocator.h): size-classed free lists under one mutex,
// bounded by a byte limit, over 64-byte aligned blocks from the C library (from 2 MiB up: mappings
// of their own, starting a few pages past a 2 MiB boundary).
#include "cpu/runtime/caching_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/allocator_stats.h"
#include "cpu/register.h"
#include "profiler/record.h"
#include "tapegrad/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define TG_CPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_CPU_ASAN 1
#endif
#endif

namespace tapegrad::cpu {

namespace {

// 64 bytes: a cache line and an AVX-512 vector.
constexpr size_t kAlignment = 64;
// Classes of 64, 128, ..., 1024 bytes, then 2^e * (1 + j/4), j = 1..4, for 2^10 < size <= 2^62.
constexpr size_t kSmallLimit = 1024;
constexpr int kSmallClasses = static_cast<int>(kSmallLimit / kAlignment);
constexpr int kFirstExponent = 10;
constexpr int kLastExponent = 61;
constexpr int kNumClasses = kSmallClasses + (kLastExponent - kFirstExponent + 1) * 4;
constexpr size_t kLargestRequest = size_t{1} << (kLastExponent + 1);
// No x86-64 or AArch64 machine maps more than 2^56 bytes of user address space. Larger requests
// fail here rather than in the C library: under AddressSanitizer a request past its own limit
// aborts the process instead of returning null.
constexpr size_t kAddressSpaceBytes = size_t{1} << 56;

int size_class(size_t nbytes) {
  if (nbytes <= kSmallLimit) return static_cast<int>((nbytes + kAlignment - 1) / kAlignment) - 1;
  // 2^e < nbytes <= 2^(e+1), split into four steps of 2^(e-2).
  const int e = 63 - __builtin_clzll(static_cast<unsigned long long>(nbytes - 1));
  const size_t step = size_t{1} << (e - 2);
  const size_t j = (nbytes - (size_t{1} << e) + step - 1) / step;  // 1..4
  return kSmallClasses + (e - kFirstExponent) * 4 + static_cast<int>(j) - 1;
}

size_t class_bytes(int cls) {
  if (cls < kSmallClasses) return static_cast<size_t>(cls + 1) * kAlignment;
  const int e = (cls - kSmallClasses) / 4 + kFirstExponent;
  const size_t j = static_cast<size_t>((cls - kSmallClasses) % 4 + 1);
  return (size_t{1} << e) + j * (size_t{1} << (e - 2));
}

bool env_flag_off(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return v == "0" || v == "off" || v == "false" || v == "no";
}

bool caching_enabled_by_default() {
#if defined(TG_CPU_ASAN)
  // Only an explicit "1" turns it on: a cached block hides a use after free from the sanitizer.
  const char* value = std::getenv("TAPEGRAD_CPU_CACHING_ALLOCATOR");
  return value != nullptr && std::string(value) == "1";
#else
  return !env_flag_off("TAPEGRAD_CPU_CACHING_ALLOCATOR");
#endif
}

size_t cache_limit_from_env() {
  const char* value = std::getenv("TAPEGRAD_CPU_CACHE_LIMIT_MB");
  if (value == nullptr || *value == '\0') return kDefaultCacheLimitBytes;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(value, &end, 10);
  if (end == value || *end != '\0') return kDefaultCacheLimitBytes;  // not a number: keep the default
  return static_cast<size_t>(std::min<unsigned long long>(mb, kLargestRequest >> 20)) << 20;
}

// Note [huge pages for large blocks]: a weight matrix of 2 MiB read with rows 4 KiB apart (an LSTM
// step's W reads its rows in place, Note [why our own sgemm]) touches a new 4 KiB page on every row,
// so a step's product misses the L1 TLB hundreds of times and walks page tables, and Adam's pass over
// 14 MB of state crosses 3,500 pages a step. Blocks of 2 MiB and more are therefore mappings of their
// own, aligned to 2 MiB (each block starts a few pages in: Note [large blocks at staggered
// offsets]), whose whole 2 MiB pieces are marked MADV_HUGEPAGE, so that the kernel may
// back them with transparent huge pages (Debian's default mode, "madvise", grants them only to
// marked memory). The tail past the last whole 2 MiB is left to small pages: rounding blocks up
// would waste up to half of a 2.5 MiB one. A mapping of its own, not the C library's heap, because
// the marking stays with the address range: a heap block marked and freed would hand huge pages to
// whatever the heap puts there next. Granting is the kernel's choice and may cost compaction at the
// first touch; the cache keeps the block, so a training loop pays it once (without the cache, every
// fresh block pays it). Measured on 2 Zen 5 cores, bench_train_steps alternated three times with
// the allocator before (C library blocks, 64 bytes past a page boundary), ms a step: lstm_large:64
// 141.3-149.0 -> 134.8-154.5, and 136.9-141.0 with the marking off; the gain is as much the blocks'
// alignment as the huge pages (docs/benchmarks.md). TAPEGRAD_CPU_HUGE_PAGES=0 (or
// set_cpu_huge_pages(false)) leaves new blocks unmarked. Under AddressSanitizer every block comes
// from the C library, which the sanitizer watches.
constexpr size_t kHugePage = size_t{2} << 20;

bool own_mapping(size_t size) {
#if defined(TG_CPU_ASAN)
  (void)size;
  return false;
#else
  return size >= kHugePage;
#endif
}

// Note [large blocks at staggered offsets]: were every large block to start on a 2 MiB boundary,
// element i of a parameter, its gradient and Adam's two moments would share their address bits up to
// bit 20, and on huge pages their physical ones too. On a 2-vCPU Intel Xeon with AMX (family 6,
// model 207) under KVM that costs a loop which stores to some of its streams and loads from others
// up to 2.7 times its time: Adam's step over mlp_seed's 517k parameters took 0.96 ms on one thread against 0.35 ms
// with the marking off (the same blocks on scattered small pages), and a loop of the same shape
// with its streams' starts 4 KiB apart 0.36 ms on huge pages. So a large block starts `offset`
// bytes past its mapping's 2 MiB boundary: 0, 1, 2, ... 63 pages, turn by turn. Pages, not bytes,
// so that rows of a weight matrix keep their page alignment; the mapping keeps its 2 MiB
// alignment, so that its whole 2 MiB pieces may still be huge pages. The price: a first piece
// granted as a huge page also backs the unused pages before the block, at most 63 (252 KiB with
// 4 KiB pages) against a block of at least 2 MiB.
size_t page_bytes() {
  static const size_t page = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

size_t next_block_offset() {
  static std::atomic<size_t> turn{0};
  const size_t page = page_bytes();
  const size_t offsets = std::max<size_t>(1, std::min<size_t>(64, kHugePage / page));
  return turn.fetch_add(1, std::memory_order_relaxed) % offsets * page;
}

// A block of `size` bytes (a multiple of the page size when own_mapping(size)), 64-byte aligned, or
// null when the system has no memory for it.
void* system_block(size_t size, bool huge_pages) {
  if (!own_mapping(size)) return std::aligned_alloc(kAlignment, size);
  const size_t offset = next_block_offset();
  // Map 2 MiB more than needed and unmap what lies before the first 2 MiB boundary and past the
  // block, which starts `offset` bytes after that boundary.
  const size_t span = offset + size + kHugePage;
  void* mapped = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (start + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  if (aligned > start) munmap(mapped, aligned - start);
  const uintptr_t end = aligned + offset + size;
  if (start + span > end) munmap(reinterpret_cast<void*>(end), start + span - end);
#if defined(MADV_HUGEPAGE)
  // Advice the kernel refuses (a kernel without transparent huge pages) leaves the block usable.
  if (huge_pages)
    (void)madvise(reinterpret_cast<void*>(aligned), (offset + size) / kHugePage * kHugePage, MADV_HUGEPAGE);
#else
  (void)huge_pages;
#endif
  return reinterpret_cast<void*>(aligned + offset);
}

void free_system_block(void* block, size_t size) {
  if (own_mapping(size)) {
    // The mapping starts at the 2 MiB boundary before the block (the offset is under 2 MiB).
    const auto at = reinterpret_cast<uintptr_t>(block);
    const uintptr_t mapping = at & ~uintptr_t{kHugePage - 1};
    munmap(reinterpret_cast<void*>(mapping), at + size - mapping);
  } else {
    std::free(block);
  }
}

class CachingCpuAllocator : public backend::CountingAllocator {
 public:
  CachingCpuAllocator()
      : enabled_(caching_enabled_by_default()),
        limit_(cache_limit_from_env()),
        huge_pages_(!env_flag_off("TAPEGRAD_CPU_HUGE_PAGES")) {}

  int64_t allocated_bytes(Device) override { return static_cast<int64_t>(stats().allocated_bytes); }

  DataPtr allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return DataPtr{nullptr, nullptr};
    TG_CHECK(nbytes <= kLargestRequest && nbytes <= kAddressSpaceBytes, "cpu allocator: out of memory allocating ",
             nbytes, " bytes (more than any address space holds)");
    const int cls = size_class(nbytes);
    const size_t size = class_bytes(cls);
    void* ptr = nullptr;
    bool caching = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      caching = enabled_;
      ++stats_.num_allocations;
      std::vector<void*>& list = free_[static_cast<size_t>(cls)];
      if (!list.empty()) {
        ptr = list.back();
        list.pop_back();
        stats_.cached_bytes -= size;
        ++stats_.num_cache_hits;
      }
      stats_.allocated_bytes += size;
      stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    }
    if (ptr == nullptr) ptr = system_allocate(size, nbytes);
    if (profiler::detail::active()) profiler::detail::note_memory(kCPU, static_cast<int64_t>(size), ptr);
    if (!caching) return DataPtr{ptr, [size](void* p) { instance_release(p, size); }};
    return DataPtr{ptr, [cls](void* p) { instance_cache(p, cls); }};
  }

  // A block freed while caching was on: kept for reuse unless the cache is full or off by now.
  void cache(void* ptr, int cls) {
    const size_t size = class_bytes(cls);
    if (profiler::detail::active()) profiler::detail::note_memory(kCPU, -static_cast<int64_t>(size), ptr);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated_bytes -= size;
      if (enabled_ && stats_.cached_bytes + size <= limit_) {
        free_[static_cast<size_t>(cls)].push_back(ptr);
        stats_.cached_bytes += size;
        stats_.peak_cached_bytes = std::max(stats_.peak_cached_bytes, stats_.cached_bytes);
        return;
      }
      ++stats_.num_system_frees;
    }
    free_system_block(ptr, size);
  }

  // A block handed out while caching was off goes straight back.
  void release(void* ptr, size_t size) {
    if (profiler::detail::active()) profiler::detail::note_memory(kCPU, -static_cast<int64_t>(size), ptr);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated_bytes -= size;
      ++stats_.num_system_frees;
    }
    free_system_block(ptr, size);
  }

  CpuMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    CpuMemoryStats s = stats_;
    s.cache_limit_bytes = limit_;
    s.caching_enabled = enabled_;
    return s;
  }

  void reset_peaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_cached_bytes = stats_.cached_bytes;
  }

  void empty_cache() { trim_to(0); }

  void set_enabled(bool enabled) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      enabled_ = enabled;
    }
    if (!enabled) trim_to(0);
  }

  // Blocks the cache holds keep the alignment they were made with: a setting for new blocks only.
  void set_huge_pages(bool on) { huge_pages_.store(on, std::memory_order_relaxed); }

  void set_limit(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = bytes;
    }
    trim_to(bytes);
  }

 private:
  static void instance_cache(void* ptr, int cls);
  static void instance_release(void* ptr, size_t size);

  void* system_allocate(size_t size, size_t requested) {
    int64_t attempts = 1;
    const bool huge_pages = huge_pages_.load(std::memory_order_relaxed);
    void* ptr = system_block(size, huge_pages);
    if (ptr == nullptr) {
      // What the cache holds may be just what the system lacks: give it back and try once more.
      empty_cache();
      ++attempts;
      ptr = system_block(size, huge_pages);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.num_system_allocs += attempts;
    if (ptr == nullptr) {
      stats_.allocated_bytes -= size;
      TG_CHECK(false, "cpu allocator: out of memory allocating ", requested, " bytes");
    }
    return ptr;
  }

  // Frees cached blocks, largest classes first, until at most `bytes` stay cached.
  void trim_to(size_t bytes) {
    std::vector<std::pair<void*, size_t>> to_free;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int cls = kNumClasses - 1; cls >= 0 && stats_.cached_bytes > bytes; --cls) {
        std::vector<void*>& list = free_[static_cast<size_t>(cls)];
        const size_t size = class_bytes(cls);
        while (!list.empty() && stats_.cached_bytes > bytes) {
          to_free.emplace_back(list.back(), size);
          list.pop_back();
          stats_.cached_bytes -= size;
        }
        if (list.empty()) std::vector<void*>().swap(list);
      }
      stats_.num_system_frees += static_cast<int64_t>(to_free.size());
    }
    for (const auto& [block, size] : to_free) free_system_block(block, size);
  }

  std::mutex mutex_;
  bool enabled_;
  size_t limit_;
  std::atomic<bool> huge_pages_;
  CpuMemoryStats stats_;
  std::array<std::vector<void*>, kNumClasses> free_;
};

// Never destroyed: a tensor may be freed during static destruction, after any static allocator
// would be gone. The blocks it caches then go back with the process.
CachingCpuAllocator& instance() {
  static CachingCpuAllocator* allocator = new CachingCpuAllocator();
  return *allocator;
}

void CachingCpuAllocator::instance_cache(void* ptr, int cls) {
  instance().cache(ptr, cls);
}
void CachingCpuAllocator::instance_release(void* ptr, size_t size) {
  instance().release(ptr, size);
}

}  // namespace

Allocator& cpu_allocator() {
  return instance();
}

CpuMemoryStats cpu_memory_stats() {
  return instance().stats();
}
void reset_peak_cpu_memory_stats() {
  instance().reset_peaks();
}
void cpu_empty_cache() {
  instance().empty_cache();
}
void set_cpu_caching_enabled(bool enabled) {
  instance().set_enabled(enabled);
}
void set_cpu_huge_pages(bool enabled) {
  instance().set_huge_pages(enabled);
}
void set_cpu_cache_limit(size_t bytes) {
  instance().set_limit(bytes);
}

size_t cpu_allocation_size(size_t nbytes) {
  TG_CHECK(nbytes > 0 && nbytes <= kLargestRequest, "cpu_allocation_size: no size class for ", nbytes, " bytes");
  return class_bytes(size_class(nbytes));
}

void register_allocator(backend::KernelTable& t) {
  t.allocator = &cpu_allocator();
}

}  // namespace tapegrad::cpu
