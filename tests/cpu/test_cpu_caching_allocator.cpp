// The CPU caching allocator: size classes, reuse of freed blocks, the cache limit, empty_cache,
// switching caching off, concurrent use, and a training loop that allocates nothing new from the
// system once its first steps have run.
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "cpu/runtime/caching_allocator.h"
#include "support/test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define TG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_TEST_ASAN 1
#endif
#endif

namespace tapegrad {
namespace {

using cpu::cpu_allocation_size;
using cpu::cpu_memory_stats;

// The VmFlags line of the mapping in /proc/self/smaps that holds `address` ("" if none does): its
// "hg" says the range was marked MADV_HUGEPAGE, whether or not the kernel then granted huge pages.
std::string mapping_flags(const void* address) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long start = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> start >> dash >> end && dash == '-') {
      inside = start <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line + " ";
    }
  }
  return "";
}

bool marked_for_huge_pages(const void* address) {
  return mapping_flags(address).find(" hg ") != std::string::npos;
}

// Turns caching on (it is off by default under AddressSanitizer) with a known limit, and puts the
// process-wide settings back afterwards.
class CachingAllocator : public ::testing::Test {
 protected:
  void SetUp() override {
    const cpu::CpuMemoryStats s = cpu_memory_stats();
    was_enabled_ = s.caching_enabled;
    old_limit_ = s.cache_limit_bytes;
    cpu::set_cpu_caching_enabled(true);
    cpu::set_cpu_cache_limit(size_t{256} << 20);
    cpu::cpu_empty_cache();
  }
  void TearDown() override {
    cpu::set_cpu_cache_limit(old_limit_);
    cpu::set_cpu_caching_enabled(was_enabled_);
  }
  bool was_enabled_ = false;
  size_t old_limit_ = 0;
};

Tensor bytes(int64_t n) {
  return empty({n}, TensorOptions().dtype(kBool));
}

TEST(CpuAllocationSize, ClassesRoundUpByAtMostAQuarter) {
  EXPECT_EQ(cpu_allocation_size(1), 64u);
  EXPECT_EQ(cpu_allocation_size(64), 64u);
  EXPECT_EQ(cpu_allocation_size(65), 128u);
  EXPECT_EQ(cpu_allocation_size(1024), 1024u);
  EXPECT_EQ(cpu_allocation_size(1025), 1280u);
  EXPECT_EQ(cpu_allocation_size(2048), 2048u);
  EXPECT_EQ(cpu_allocation_size(2049), 2560u);
  EXPECT_EQ(cpu_allocation_size(size_t{1} << 62), size_t{1} << 62);
  size_t previous = 0;
  for (size_t n = 1; n < (size_t{1} << 40); n = n * 5 / 4 + 7) {
    const size_t s = cpu_allocation_size(n);
    EXPECT_GE(s, n);
    EXPECT_EQ(s % 64, 0u) << n;
    EXPECT_LE(s, std::max<size_t>((n + 63) / 64 * 64, n + n / 4)) << n;
    EXPECT_GE(s, previous) << n;
    EXPECT_EQ(cpu_allocation_size(s), s) << "a class size is its own class";
    previous = s;
  }
  testing::expect_error([] { cpu_allocation_size(0); }, {"cpu_allocation_size"});
}

TEST_F(CachingAllocator, FreedBlockIsReusedForTheSameClass) {
  void* first = nullptr;
  {
    Tensor t = bytes(300000);
    first = t.data_ptr();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  }
  const cpu::CpuMemoryStats before = cpu_memory_stats();
  EXPECT_EQ(before.cached_bytes, cpu_allocation_size(300000));
  Tensor again = bytes(290000);  // another size of the same class
  const cpu::CpuMemoryStats after = cpu_memory_stats();
  EXPECT_EQ(again.data_ptr(), first);
  EXPECT_EQ(after.num_cache_hits, before.num_cache_hits + 1);
  EXPECT_EQ(after.num_system_allocs, before.num_system_allocs);
  EXPECT_EQ(after.cached_bytes, 0u);
}

TEST_F(CachingAllocator, EveryBlockIsAligned) {
  std::vector<Tensor> kept;
  for (int64_t n : {1, 3, 63, 64, 65, 1000, 1025, 4097, 100003, 1 << 20}) {
    kept.push_back(bytes(n));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(kept.back().data_ptr()) % 64, 0u) << n;
  }
  EXPECT_EQ(empty({0}).data_ptr(), nullptr);
}

// Whether this kernel takes MADV_HUGEPAGE at all (one built without transparent huge pages refuses
// it), tried on a mapping of the test's own.
bool kernel_takes_huge_page_advice() {
  const size_t size = size_t{4} << 20;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
#if defined(MADV_HUGEPAGE)
  const bool taken = madvise(p, size, MADV_HUGEPAGE) == 0;
#else
  const bool taken = false;
#endif
  munmap(p, size);
  return taken;
}

constexpr uintptr_t kTwoMiB = uintptr_t{2} << 20;

// How far past the 2 MiB boundary before it `address` lies.
uintptr_t offset_in_two_mib(const void* address) {
  return reinterpret_cast<uintptr_t>(address) % kTwoMiB;
}

// Note [huge pages for large blocks].
TEST_F(CachingAllocator, BlocksOfTwoMiBAndMoreAreMarkedForHugePages) {
  cpu::set_cpu_huge_pages(true);
  Tensor big = bytes(5 << 20), exact = bytes(2 << 20), small = bytes(1 << 20);
  ASSERT_FALSE(mapping_flags(small.data_ptr()).empty()) << "no mapping in /proc/self/smaps holds the block";
  // The negative control: a block under 2 MiB is not marked, so the reader can say no.
  EXPECT_FALSE(marked_for_huge_pages(small.data_ptr())) << mapping_flags(small.data_ptr());
#if defined(TG_TEST_ASAN)
  for (const Tensor* t : {&big, &exact}) EXPECT_FALSE(marked_for_huge_pages(t->data_ptr())) << "the C library's";
#else
  if (!kernel_takes_huge_page_advice()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  for (const Tensor* t : {&big, &exact}) {
    const auto* first = static_cast<const char*>(t->data_ptr());
    EXPECT_EQ(offset_in_two_mib(first) % 4096, 0u) << "a block starts on a page";
    EXPECT_TRUE(marked_for_huge_pages(first)) << mapping_flags(first);
    // The block's first 2 MiB piece ends this far in, and is marked to its end.
    EXPECT_TRUE(marked_for_huge_pages(first + (kTwoMiB - offset_in_two_mib(first)) - 1));
  }
  // The tail past the mapping's last whole 2 MiB (about 1 MiB of the 5) is left unmarked.
  const auto* first = static_cast<const char*>(big.data_ptr());
  EXPECT_FALSE(marked_for_huge_pages(first + (4 << 20) - offset_in_two_mib(first)));
#endif
  static_cast<bool*>(big.data_ptr())[(5 << 20) - 1] = true;  // the whole block is usable
}

// Note [large blocks at staggered offsets]: large blocks made one after another start at distinct
// offsets from a 2 MiB boundary, so that element i of each does not share its address bits up to
// bit 20 with element i of the others.
TEST_F(CachingAllocator, LargeBlocksMadeInTurnStartAtDistinctOffsets) {
  std::vector<Tensor> blocks;
  std::set<uintptr_t> offsets;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(bytes(int64_t{2} << 20));
    static_cast<bool*>(blocks.back().data_ptr())[(2 << 20) - 1] = true;
    offsets.insert(offset_in_two_mib(blocks.back().data_ptr()));
  }
#if defined(TG_TEST_ASAN)
  for (const Tensor& b : blocks) EXPECT_EQ(offset_in_two_mib(b.data_ptr()) % 64, 0u) << "the C library's";
#else
  // The other tests of this process make their large blocks on this thread, so no other block took
  // a turn in between: 8 turns in a row are 8 distinct offsets, each a whole number of pages.
  EXPECT_EQ(offsets.size(), 8u);
  for (uintptr_t o : offsets) EXPECT_EQ(o % 4096, 0u) << o;
  // The control: given back and asked for again, a cached block keeps its offset (the cache hands
  // out the block itself), so the 8 offsets above are not a property of every pointer.
  void* kept = blocks.back().data_ptr();
  blocks.pop_back();
  Tensor again = bytes(int64_t{2} << 20);
  EXPECT_EQ(again.data_ptr(), kept);
#endif
}

// A block past the start of its mapping is given back whole: the pages before it go with it.
TEST_F(CachingAllocator, AGivenBackLargeBlockTakesThePagesBeforeItWithIt) {
#if defined(TG_TEST_ASAN)
  GTEST_SKIP() << "under AddressSanitizer large blocks are the C library's";
#else
  std::vector<Tensor> blocks;
  const char* first = nullptr;
  for (int i = 0; i < 64 && first == nullptr; ++i) {
    blocks.push_back(bytes(int64_t{3} << 20));
    if (offset_in_two_mib(blocks.back().data_ptr()) != 0) first = static_cast<const char*>(blocks.back().data_ptr());
  }
  ASSERT_NE(first, nullptr) << "no block started past a 2 MiB boundary";
  const char* mapping = first - offset_in_two_mib(first);
  ASSERT_FALSE(mapping_flags(mapping).empty()) << "the pages before the block belong to it";
  blocks.clear();
  cpu::cpu_empty_cache();
  EXPECT_TRUE(mapping_flags(mapping).empty()) << mapping_flags(mapping);
  EXPECT_TRUE(mapping_flags(first).empty()) << mapping_flags(first);
#endif
}

TEST_F(CachingAllocator, HugePagesOffLeavesLargeBlocksUnmarked) {
  cpu::set_cpu_huge_pages(false);
  cpu::cpu_empty_cache();  // a cached block would keep the marking it was made with
  Tensor big = bytes(6 << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data_ptr()) % 64, 0u);
  EXPECT_FALSE(marked_for_huge_pages(big.data_ptr())) << mapping_flags(big.data_ptr());
  cpu::set_cpu_huge_pages(true);
#if !defined(TG_TEST_ASAN)
  if (!kernel_takes_huge_page_advice()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  Tensor marked = bytes(6 << 20);  // the control: with them on, the next block of the size is marked
  EXPECT_TRUE(marked_for_huge_pages(marked.data_ptr())) << mapping_flags(marked.data_ptr());
#endif
}

// A large block is a mapping of its own: given back, it takes its marking with it, so nothing else
// the process allocates later lands on memory marked for huge pages. (A block of the C library's
// heap, marked and freed below a block still in use, keeps its marking for whatever the heap puts
// there next: the pins below keep each freed range from being trimmed off the heap's top.)
TEST_F(CachingAllocator, AGivenBackBlockLeavesNoMarkingBehind) {
  cpu::set_cpu_huge_pages(true);
  // A freed 16 MiB block raises the C library's threshold for mapping blocks of their own, so that
  // (were they the C library's) the 4 MiB blocks below would come from its heap.
  { Tensor larger = bytes(16 << 20); }
  cpu::cpu_empty_cache();
  std::vector<void*> pins, reused;
  for (int i = 0; i < 4; ++i) {
    {
      Tensor big = bytes(4 << 20);
      static_cast<bool*>(big.data_ptr())[0] = true;
      pins.push_back(std::malloc(size_t{64} << 10));
    }
    cpu::cpu_empty_cache();
    reused.push_back(std::malloc(size_t{3} << 20));  // where the heap has room: a freed range, if any
  }
  for (void* b : reused) {
    EXPECT_FALSE(marked_for_huge_pages(b)) << mapping_flags(b);
    std::free(b);
  }
  for (void* p : pins) std::free(p);
}

// Large blocks made, written, cached and given back from four threads while the huge-page setting
// and the cache are switched under them: every block stays usable and the counts balance.
TEST_F(CachingAllocator, LargeBlocksFromManyThreadsWhileTheSettingChanges) {
  const size_t allocated_before = cpu_memory_stats().allocated_bytes;
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 40; ++i) {
        const int64_t n = (int64_t{2} << 20) + ((i * 7 + t * 3) % 9) * (int64_t{512} << 10);
        Tensor a = bytes(n);
        auto* p = static_cast<bool*>(a.data_ptr());
        p[0] = true;
        p[n - 1] = true;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
      }
    });
  }
  std::thread flipper([&done] {
    for (int i = 0; !done.load(); ++i) {
      cpu::set_cpu_huge_pages(i % 2 == 0);
      if (i % 3 == 0) cpu::cpu_empty_cache();
      std::this_thread::yield();
    }
  });
  for (std::thread& th : threads) th.join();
  done = true;
  flipper.join();
  cpu::set_cpu_huge_pages(true);
  EXPECT_EQ(cpu_memory_stats().allocated_bytes, allocated_before);
}

TEST_F(CachingAllocator, BlocksOverTheLimitGoBackToTheSystem) {
  cpu::set_cpu_cache_limit(size_t{1} << 20);
  const cpu::CpuMemoryStats before = cpu_memory_stats();
  { Tensor big = bytes(2 << 20); }
  cpu::CpuMemoryStats s = cpu_memory_stats();
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.num_system_frees, before.num_system_frees + 1);
  { Tensor a = bytes(600 << 10), b = bytes(600 << 10); }
  s = cpu_memory_stats();
  EXPECT_LE(s.cached_bytes, size_t{1} << 20);
  EXPECT_EQ(s.cached_bytes, cpu_allocation_size(600 << 10)) << "one fits, the other is freed";
  // Lowering the limit trims what is cached at once.
  cpu::set_cpu_cache_limit(0);
  EXPECT_EQ(cpu_memory_stats().cached_bytes, 0u);
}

TEST_F(CachingAllocator, EmptyCacheFreesCachedBlocksButNotLiveOnes) {
  Tensor live = full({1000}, 3.0);
  { Tensor a = bytes(5000), b = bytes(70000); }
  EXPECT_GT(cpu_memory_stats().cached_bytes, 0u);
  cpu::cpu_empty_cache();
  const cpu::CpuMemoryStats s = cpu_memory_stats();
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_GE(s.allocated_bytes, cpu_allocation_size(4000));
  EXPECT_EQ(testing::values(live), std::vector<double>(1000, 3.0));
}

TEST_F(CachingAllocator, SwitchingCachingOffReleasesEverything) {
  Tensor live_before = bytes(10000);
  { Tensor a = bytes(10000); }
  EXPECT_GT(cpu_memory_stats().cached_bytes, 0u);
  cpu::set_cpu_caching_enabled(false);
  EXPECT_EQ(cpu_memory_stats().cached_bytes, 0u);
  EXPECT_FALSE(cpu_memory_stats().caching_enabled);
  Tensor live_while_off = bytes(10000);
  live_before = Tensor();  // handed out while on, freed while off: not cached
  EXPECT_EQ(cpu_memory_stats().cached_bytes, 0u);
  cpu::set_cpu_caching_enabled(true);
  live_while_off = Tensor();  // handed out while off: goes back to the system
  EXPECT_EQ(cpu_memory_stats().cached_bytes, 0u);
  { Tensor b = bytes(10000); }
  EXPECT_EQ(cpu_memory_stats().cached_bytes, cpu_allocation_size(10000));
}

TEST_F(CachingAllocator, ConcurrentAllocationsBalance) {
  const size_t allocated_before = cpu_memory_stats().allocated_bytes;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 2000; ++i) {
        Tensor a = bytes(64 + (i * 37 + t * 101) % 50000);
        Tensor b = bytes(1 + (i * 13) % 3000);
        static_cast<bool*>(a.data_ptr())[0] = true;
        static_cast<bool*>(b.data_ptr())[0] = true;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const cpu::CpuMemoryStats s = cpu_memory_stats();
  EXPECT_EQ(s.allocated_bytes, allocated_before);
  EXPECT_LE(s.cached_bytes, s.cache_limit_bytes);
}

// Once a training step has run, the next ones take every block from the cache.
TEST_F(CachingAllocator, SteadyTrainingStepsAllocateNothingFromTheSystem) {
  manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(40, 64), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 5)});
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
  nn::CrossEntropyLoss loss_fn;
  Tensor x = randn({32, 40});
  Tensor y = randint(0, 5, {32});
  auto step = [&] {
    Tensor l = loss_fn(model->forward(x), y);
    opt.zero_grad();
    l.backward();
    opt.step();
  };
  step();
  step();
  const cpu::CpuMemoryStats before = cpu_memory_stats();
  for (int i = 0; i < 3; ++i) step();
  const cpu::CpuMemoryStats after = cpu_memory_stats();
  EXPECT_GT(after.num_allocations, before.num_allocations);
  EXPECT_EQ(after.num_system_allocs, before.num_system_allocs);
  EXPECT_EQ(after.num_system_frees, before.num_system_frees);
}

}  // namespace
}  // namespace tapegrad
