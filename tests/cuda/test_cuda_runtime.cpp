// The CUDA runtime layer on a GPU: devices and guards, the caching allocator (reuse, steady state,
// statistics, splitting, empty_cache, out of memory), streams and events, pinned memory and its
// reuse safety, and DataLoader(pin_memory). Every case skips where no GPU is present.
#include <optional>
#include <thread>

#include "support/gpu.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

// The allocator's own behaviour, absent when TAPEGRAD_CUDA_CACHING_ALLOCATOR=0 gives each tensor
// its own cudaMalloc (as the sanitizer runs do).
#define SKIP_WITHOUT_CACHE() \
  if (!cuda::caching_allocator_enabled()) GTEST_SKIP() << "the caching allocator is bypassed"

constexpr size_t kMiB = size_t(1) << 20;

TensorOptions on_gpu(DType dtype = kFloat32) {
  return TensorOptions(dtype).device(kCUDA);
}

// Starts a test from a known allocator state: no cached segments on the current device.
cuda::MemoryStats fresh_stats() {
  cuda::synchronize();
  cuda::empty_cache();
  cuda::reset_peak_memory_stats();
  return cuda::memory_stats();
}

TEST(CudaDevice, QueriesAndProperties) {
  SKIP_WITHOUT_GPU();
  int count = cuda::device_count();
  int current = cuda::current_device();
  EXPECT_GE(current, 0);
  EXPECT_LT(current, count);
  cuda::DeviceProperties props = cuda::get_device_properties();
  EXPECT_FALSE(props.name.empty());
  EXPECT_GT(props.total_memory, 0u);
  EXPECT_GT(props.multiprocessor_count, 0);
  EXPECT_GE(props.major, 1);
  cuda::MemoryInfo info = cuda::mem_get_info();
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  EXPECT_NO_THROW(cuda::synchronize());
  expect_error([&] { cuda::set_device(count); }, {"set_device", "invalid device index"});
  expect_error([&] { cuda::get_device_properties(count); }, {"invalid device index"});
  expect_error([] { cuda::set_device(-3); }, {"set_device"});
}

TEST(CudaDevice, DeviceGuardRestores) {
  SKIP_WITHOUT_GPU();
  int count = cuda::device_count();
  int original = cuda::current_device();
  {
    cuda::DeviceGuard outer(count - 1);
    EXPECT_EQ(cuda::current_device(), count - 1);
    EXPECT_EQ(outer.original_device(), original);
    {
      cuda::DeviceGuard inner(0);
      EXPECT_EQ(cuda::current_device(), 0);
    }
    EXPECT_EQ(cuda::current_device(), count - 1);
    cuda::DeviceGuard cpu(kCPU);  // does nothing
    EXPECT_EQ(cuda::current_device(), count - 1);
  }
  EXPECT_EQ(cuda::current_device(), original);
  expect_error([&] { cuda::DeviceGuard bad(count); }, {"DeviceGuard", "invalid device index"});
  EXPECT_EQ(cuda::current_device(), original);
}

TEST(CudaDevice, MemoryGoesToTheTensorsDevice) {
  SKIP_WITHOUT_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  cuda::DeviceGuard guard(0);
  size_t before0 = cuda::memory_allocated(0), before1 = cuda::memory_allocated(1);
  Tensor host = arange(0, 1000, 1, TensorOptions(kFloat32));
  Tensor t = host.to(Device("cuda:1"));
  EXPECT_EQ(t.device(), Device("cuda:1"));
  EXPECT_EQ(cuda::current_device(), 0);
  if (cuda::caching_allocator_enabled()) {  // otherwise the statistics stay zero
    EXPECT_GT(cuda::memory_allocated(1), before1);
    EXPECT_EQ(cuda::memory_allocated(0), before0);
  }
  EXPECT_EQ(t.cpu().tolist<float>(), host.tolist<float>());
}

// Every kernel family runs on its tensors' device, whichever device is current: reductions,
// softmax, cross-entropy, index ops, pointwise ops, copies, fills, ranges and draws on cuda:1
// while cuda:0 is current, forward and backward, against the CPU.
TEST(CudaDevice, KernelsRunOnTheTensorsDeviceNotTheCurrentOne) {
  SKIP_WITHOUT_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  cuda::DeviceGuard guard(0);
  const Device one("cuda:1");
  Tensor x = testing::leaf({6, 5}, 3);
  Tensor labels = tensor<int64_t>({0, 4, 2, 1, 3, 0});
  auto run = [&](Device device) {
    Tensor xd = x.detach().to(device).requires_grad_();
    Tensor logits = add(mul(xd, 2.0), full({6, 5}, 0.5, TensorOptions(kFloat64).device(device)));
    Tensor picked = index_select(logits, 0, tensor<int64_t>({5, 0, 3}).to(device));
    Tensor loss = add(add(cross_entropy(logits, labels.to(device)), sum(softmax(picked, 1))),
                      add(mean(max(logits, 1).values), sum(logits.t().contiguous())));
    loss.backward();
    return std::vector<Tensor>{loss.cpu(), xd.grad().cpu(),
                               arange(0, 7, 1, TensorOptions(kFloat32).device(device)).cpu()};
  };
  std::vector<Tensor> want = run(kCPU), got = run(one);
  for (size_t i = 0; i < want.size(); ++i) testing::expect_close(got[i], want[i], 1e-5);
  EXPECT_EQ(cuda::current_device(), 0);
}

TEST(CachingAllocator, ReusesAFreedBlock) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CACHE();
  fresh_stats();
  void* first = nullptr;
  {
    Tensor t = empty({1000}, on_gpu());
    first = t.data_ptr();
  }
  int64_t mallocs = cuda::memory_stats().num_device_mallocs;
  Tensor again = empty({1000}, on_gpu());
  EXPECT_EQ(again.data_ptr(), first);
  EXPECT_EQ(cuda::memory_stats().num_device_mallocs, mallocs);
}

TEST(CachingAllocator, SteadyStateDoesNoCudaMalloc) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CACHE();
  cuda::MemoryStats base = fresh_stats();
  int64_t mallocs_after_first_step = -1;
  size_t reserved_after_first_step = 0;
  for (int step = 0; step < 50; ++step) {
    // A "training step": small, large-shared-segment and own-segment tensors, some still alive
    // while others are freed, in a fixed order.
    Tensor a = empty({1000}, on_gpu());
    Tensor b = zeros({300000}, on_gpu());         // 1.2 MB: large pool, 20 MiB segment
    Tensor c = empty({5000000}, on_gpu());        // 20 MB: a segment of its own
    Tensor d = full({7}, 1.0, on_gpu(kFloat64));  // tiny
    a = Tensor();
    Tensor e = empty({4096}, on_gpu(kInt64));
    b = Tensor();
    EXPECT_EQ(d.cpu().tolist<double>()[0], 1.0);
    if (step == 0) {
      mallocs_after_first_step = cuda::memory_stats().num_device_mallocs;
      reserved_after_first_step = cuda::memory_reserved();
    }
  }
  cuda::MemoryStats stats = cuda::memory_stats();
  EXPECT_EQ(stats.num_device_mallocs, mallocs_after_first_step);
  EXPECT_EQ(stats.reserved_bytes, reserved_after_first_step);
  EXPECT_EQ(stats.num_device_frees, base.num_device_frees);
}

TEST(CachingAllocator, StatisticsAndPeak) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CACHE();
  cuda::MemoryStats base = fresh_stats();
  EXPECT_EQ(base.peak_allocated_bytes, base.allocated_bytes);
  {
    Tensor t = empty({int64_t(kMiB)}, on_gpu());  // 4 MiB, a multiple of 512: no rounding
    cuda::MemoryStats s = cuda::memory_stats();
    EXPECT_EQ(s.allocated_bytes, base.allocated_bytes + 4 * kMiB);
    EXPECT_GE(s.reserved_bytes, s.allocated_bytes);
    EXPECT_EQ(s.peak_allocated_bytes, s.allocated_bytes);
    EXPECT_EQ(s.num_allocations, base.num_allocations + 1);
    EXPECT_EQ(cuda::memory_allocated(), s.allocated_bytes);
    EXPECT_EQ(cuda::max_memory_allocated(), s.peak_allocated_bytes);
  }
  cuda::MemoryStats after = cuda::memory_stats();
  EXPECT_EQ(after.allocated_bytes, base.allocated_bytes);
  EXPECT_EQ(after.peak_allocated_bytes, base.allocated_bytes + 4 * kMiB);
  cuda::reset_peak_memory_stats();
  EXPECT_EQ(cuda::max_memory_allocated(), base.allocated_bytes);
  // Small requests are rounded up to 512 bytes.
  Tensor tiny = empty({3}, on_gpu());
  EXPECT_EQ(cuda::memory_allocated(), base.allocated_bytes + 512);
}

TEST(CachingAllocator, SplitsLargeBlocksAndMergesThemBack) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CACHE();
  cuda::MemoryStats base = fresh_stats();
  {
    Tensor a = empty({int64_t(kMiB)}, on_gpu());  // 4 MiB from a new 20 MiB segment
    cuda::MemoryStats s = cuda::memory_stats();
    EXPECT_EQ(s.num_device_mallocs, base.num_device_mallocs + 1);
    EXPECT_EQ(s.reserved_bytes, base.reserved_bytes + 20 * kMiB);
    Tensor b = empty({int64_t(kMiB)}, on_gpu());  // the rest of that segment
    s = cuda::memory_stats();
    EXPECT_EQ(s.num_device_mallocs, base.num_device_mallocs + 1);
    EXPECT_EQ(s.reserved_bytes, base.reserved_bytes + 20 * kMiB);
    EXPECT_EQ(static_cast<char*>(b.data_ptr()) - static_cast<char*>(a.data_ptr()), int64_t(4 * kMiB));
  }
  // Both freed: the segment is one block again, so empty_cache can release it.
  cuda::empty_cache();
  cuda::MemoryStats s = cuda::memory_stats();
  EXPECT_EQ(s.reserved_bytes, base.reserved_bytes);
  EXPECT_EQ(s.num_device_frees, base.num_device_frees + 1);
}

TEST(CachingAllocator, EmptyCacheKeepsLiveTensors) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CACHE();
  cuda::MemoryStats base = fresh_stats();
  Tensor live = full({1000}, 2.5, on_gpu());
  { Tensor gone = empty({int64_t(3 * kMiB)}, on_gpu()); }
  EXPECT_GT(cuda::memory_reserved(), base.reserved_bytes + 12 * kMiB);
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_reserved(), base.reserved_bytes + 2 * kMiB);  // the small segment `live` sits in
  for (float v : live.cpu().tolist<float>()) EXPECT_EQ(v, 2.5f);
}

TEST(CachingAllocator, OutOfMemoryIsAClearError) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CACHE();
  cuda::MemoryStats base = fresh_stats();
  // 2^48 floats: 1 PiB.
  expect_error([] { empty({int64_t(1) << 48}, on_gpu()); },
               {"out of memory", "1125899906842624 bytes", "1.00 PiB", "free", "total", "cuda:"});
  cuda::MemoryStats s = cuda::memory_stats();
  EXPECT_EQ(s.num_ooms, base.num_ooms + 1);
  EXPECT_EQ(s.num_alloc_retries, base.num_alloc_retries + 1);
  EXPECT_EQ(s.allocated_bytes, base.allocated_bytes);
  // The allocator still works.
  Tensor t = full({10}, 1.0, on_gpu());
  EXPECT_EQ(t.cpu().tolist<float>()[9], 1.0f);
}

TEST(CudaStream, GuardMakesAStreamCurrent) {
  SKIP_WITHOUT_GPU();
  cuda::Stream side;
  EXPECT_FALSE(side.is_default());
  EXPECT_EQ(side.device(), cuda::current_device());
  EXPECT_NE(side.handle(), nullptr);
  EXPECT_EQ(cuda::current_stream(), cuda::default_stream());
  EXPECT_TRUE(cuda::current_stream().is_default());
  Tensor host = arange(0, 1 << 20, 1, TensorOptions(kFloat32));
  Tensor filled, copied;
  {
    cuda::StreamGuard guard(side);
    EXPECT_EQ(cuda::current_stream(), side);
    filled = full({1 << 20}, 3.0, on_gpu());
    copied = host.to(kCUDA);
    cuda::record_stream(filled, side);  // allocated on `side` already: a no-op
  }
  EXPECT_EQ(cuda::current_stream(), cuda::default_stream());
  side.synchronize();
  EXPECT_TRUE(side.query());
  for (float v : filled.cpu().tolist<float>()) ASSERT_EQ(v, 3.0f);
  EXPECT_EQ(copied.cpu().tolist<float>(), host.tolist<float>());
}

// Backward runs each node on the stream its forward used: a model run under a side stream and
// differentiated from the default stream gets the gradients it would get on one stream (in the
// emulation build, where streams run only when waited for, a node run on the wrong stream reads
// saved tensors that were never written).
TEST(CudaStream, BackwardRunsOnTheForwardsStream) {
  SKIP_WITHOUT_GPU();
  Tensor x = testing::leaf({8, 16}, 11), w = testing::leaf({16, 4}, 12);
  auto run = [&](Device device, bool side) {
    Tensor xd = x.detach().to(device).requires_grad_(), wd = w.detach().to(device).requires_grad_();
    Tensor loss;
    {
      std::optional<cuda::Stream> stream;
      std::optional<cuda::StreamGuard> on_side;
      if (side) {
        stream.emplace();
        on_side.emplace(*stream);
      }
      loss = sum(mul(relu(matmul(xd, wd)), 3.0));
    }
    loss.backward();  // from the default stream
    return std::vector<Tensor>{xd.grad().cpu(), wd.grad().cpu()};
  };
  std::vector<Tensor> want = run(kCPU, false), got = run(kCUDA, true);
  for (size_t i = 0; i < want.size(); ++i) testing::expect_close(got[i], want[i], 1e-4);
}

TEST(CudaStream, CurrentStreamIsPerThread) {
  SKIP_WITHOUT_GPU();
  cuda::Stream side;
  cuda::StreamGuard guard(side);
  bool other_thread_sees_default = false;
  std::thread other([&] { other_thread_sees_default = cuda::current_stream().is_default(); });
  other.join();
  EXPECT_TRUE(other_thread_sees_default);
  EXPECT_EQ(cuda::current_stream(), side);
}

TEST(CudaStream, SetCurrentStreamAndNesting) {
  SKIP_WITHOUT_GPU();
  cuda::Stream a, b;
  {
    cuda::StreamGuard ga(a);
    {
      cuda::StreamGuard gb(b);
      EXPECT_EQ(cuda::current_stream(), b);
    }
    EXPECT_EQ(cuda::current_stream(), a);
  }
  cuda::set_current_stream(b);
  EXPECT_EQ(cuda::current_stream(), b);
  cuda::set_current_stream(cuda::default_stream());
  EXPECT_TRUE(cuda::current_stream().is_default());
}

TEST(CudaEvent, TimesWorkAndOrdersStreams) {
  SKIP_WITHOUT_GPU();
  cuda::Event start(true), end(true);
  EXPECT_TRUE(start.query());  // never recorded
  start.record();
  Tensor t = full({1 << 22}, 7.0, on_gpu());
  end.record();
  float ms = start.elapsed_ms(end);
  EXPECT_GE(ms, 0.0f);
  EXPECT_TRUE(end.query());

  cuda::Event untimed;
  untimed.record();
  untimed.synchronize();
  expect_error([&] { start.elapsed_ms(untimed); }, {"elapsed_ms", "enable_timing"});

  // A producer stream hands a result to the default stream through an event.
  cuda::Stream producer;
  cuda::Event ready;
  Tensor produced;
  {
    cuda::StreamGuard guard(producer);
    produced = full({1 << 22}, 5.0, on_gpu());
    ready.record();
  }
  cuda::current_stream().wait(ready);
  for (float v : produced.cpu().tolist<float>()) ASSERT_EQ(v, 5.0f);
  cuda::record_stream(produced, cuda::current_stream());
}

TEST(CudaEvent, RecordStreamDefersReuse) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CACHE();
  fresh_stats();
  cuda::Stream side;
  // 12 MiB: a segment of exactly that size, so a later request of that size has one candidate.
  const int64_t n = 3 * int64_t(kMiB);
  { Tensor warm = empty({n}, on_gpu()); }
  int64_t mallocs = cuda::memory_stats().num_device_mallocs;
  {
    Tensor t = empty({n}, on_gpu());
    cuda::Stream::default_stream().synchronize();
    {
      cuda::StreamGuard guard(side);
      t.fill_(4.0);  // used on `side`, allocated on the default stream
    }
    cuda::record_stream(t, side);
  }
  side.synchronize();
  Tensor again = empty({n}, on_gpu());  // the held-back block is free by now: reused
  EXPECT_EQ(cuda::memory_stats().num_device_mallocs, mallocs);
}

TEST(PinnedMemory, RoundTripsExactly) {
  SKIP_WITHOUT_GPU();
  Tensor host = rand({1000, 37});
  Tensor pinned = host.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_FALSE(host.is_pinned());
  EXPECT_TRUE(pinned.device().is_cpu());
  EXPECT_TRUE(pinned.pin_memory().is_same(pinned));  // already pinned
  EXPECT_EQ(pinned.tolist<float>(), host.tolist<float>());
  Tensor device = pinned.to(kCUDA);
  cuda::current_stream().synchronize();
  EXPECT_EQ(device.cpu().tolist<float>(), host.tolist<float>());

  // Device to pinned host memory, other dtypes, a transposed source, an empty tensor.
  Tensor back = empty({1000, 37}).pin_memory();
  back.copy_(device);
  EXPECT_EQ(back.tolist<float>(), host.tolist<float>());
  Tensor ints = arange(0, 5000, 1, TensorOptions(kInt64)).pin_memory();
  EXPECT_EQ(ints.to(kCUDA).cpu().tolist<int64_t>(), arange(0, 5000).tolist<int64_t>());
  Tensor doubles = rand({17, 3}, TensorOptions(kFloat64));
  Tensor transposed = doubles.t().pin_memory();
  EXPECT_TRUE(transposed.is_contiguous());
  EXPECT_EQ(transposed.tolist<double>(), doubles.t().tolist<double>());
  EXPECT_EQ(transposed.to(kCUDA).cpu().tolist<double>(), doubles.t().tolist<double>());
  Tensor none = empty({0, 4}).pin_memory();
  EXPECT_TRUE(none.is_pinned());
  EXPECT_EQ(none.to(kCUDA).numel(), 0);
  expect_error([&] { device.pin_memory(); }, {"pin_memory", "CPU"});
}

TEST(PinnedMemory, BlockIsNotReusedWhileACopyMayReadIt) {
  SKIP_WITHOUT_GPU();
  const int64_t n = testing::gpu_size(1 << 24, 1 << 18);  // 64 MiB of floats on a GPU
  Tensor expected = arange(0, double(n), 1, TensorOptions(kFloat32));
  Tensor pinned = expected.pin_memory();
  Tensor minus_one = full({n}, -1.0);
  cuda::synchronize();
  cuda::Stream stream;
  Tensor device;
  {
    cuda::StreamGuard guard(stream);
    // Queue work ahead of the copy (tens of milliseconds) so that it is still pending when its
    // source is freed below.
    Tensor busy = empty({testing::gpu_size(int64_t(1) << 28, 1 << 12)}, on_gpu());
    for (int i = 0; i < 100; ++i) busy.fill_(double(i));
    device = pinned.to(kCUDA);
    pinned = Tensor();  // freed while the copy may be in flight
    // A new pinned tensor of the same size class, written at once: it must not be the block the
    // copy reads, unless that copy has already finished.
    Tensor scribble = minus_one.pin_memory();
    EXPECT_EQ(scribble.tolist<float>()[0], -1.0f);
  }
  stream.synchronize();
  EXPECT_EQ(device.cpu().tolist<float>(), expected.tolist<float>());

  // Once the stream has passed the copies, freed blocks are reused without a new cudaHostAlloc.
  cuda::HostMemoryStats before = cuda::host_memory_stats();
  Tensor reused = expected.pin_memory();
  cuda::HostMemoryStats after = cuda::host_memory_stats();
  EXPECT_EQ(after.num_host_allocs, before.num_host_allocs);
  EXPECT_EQ(after.blocks_awaiting_copies, 0);
  EXPECT_GE(after.allocated_bytes, size_t(n) * 4);
}

TEST(PinnedMemory, EmptyHostCacheReleasesIdleBlocks) {
  SKIP_WITHOUT_GPU();
  { Tensor p = ones({12345}).pin_memory(); }
  cuda::current_stream().synchronize();
  cuda::HostMemoryStats before = cuda::host_memory_stats();
  EXPECT_GT(before.reserved_bytes, before.allocated_bytes);
  cuda::empty_host_cache();
  cuda::HostMemoryStats after = cuda::host_memory_stats();
  EXPECT_EQ(after.reserved_bytes, after.allocated_bytes);
  EXPECT_GT(after.num_host_frees, before.num_host_frees);
}

TEST(PinnedMemory, DataLoaderPinsBatches) {
  SKIP_WITHOUT_GPU();
  TensorDataset data(rand({10, 3}), arange(10));
  for (bool prefetch : {false, true}) {
    DataLoaderOptions plain;
    plain.batch_size = 4;
    plain.prefetch = prefetch;
    DataLoaderOptions pinned = plain;
    pinned.pin_memory = true;
    DataLoader reference(data, plain), loader(data, pinned);
    std::vector<std::vector<float>> expected;
    for (const Example& batch : reference) expected.push_back(batch.input.tolist<float>());
    size_t k = 0;
    for (const Example& batch : loader) {
      EXPECT_TRUE(batch.input.is_pinned());
      EXPECT_TRUE(batch.target.is_pinned());
      ASSERT_LT(k, expected.size());
      EXPECT_EQ(batch.input.to(kCUDA).cpu().tolist<float>(), expected[k]);
      ++k;
    }
    EXPECT_EQ(k, expected.size());
  }
}

}  // namespace
}  // namespace tapegrad
