// The CUDA runtime API where no GPU is present (no device, or a build without CUDA): pinning and
// DataLoader(pin_memory) fail clearly, queries answer sensibly, statistics are zero. Cases that
// need "no GPU" skip on a GPU machine; test_cuda_runtime covers the GPU side.
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

#define SKIP_WITH_GPU() \
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present (test_cuda_runtime covers it)"

TEST(PinnedMemoryNoGpu, PinMemoryIsAClearError) {
  SKIP_WITH_GPU();
  Tensor t = ones({3, 4});
  expect_error([&] { t.pin_memory(); }, {"pin_memory", "CUDA"});
  expect_error([] { cuda::host_allocator(); }, {"pinned host memory", "CUDA"});
}

TEST(PinnedMemory, OrdinaryTensorsAreNotPinned) {
  EXPECT_FALSE(ones({3, 4}).is_pinned());
  EXPECT_FALSE(empty({0}).is_pinned());
  EXPECT_FALSE(Tensor().is_pinned());
  EXPECT_FALSE(cuda::is_pinned(nullptr));
  Tensor t = arange(0, 12, 1, TensorOptions(kFloat32)).view({3, 4});
  EXPECT_FALSE(cuda::is_pinned(t.data_ptr()));
}

TEST(PinnedMemoryNoGpu, DataLoaderPinMemoryIsAClearError) {
  SKIP_WITH_GPU();
  TensorDataset data(rand({10, 3}), arange(10));
  DataLoaderOptions options;
  options.batch_size = 4;
  options.pin_memory = true;
  expect_error([&] { DataLoader loader(data, options); }, {"DataLoader", "pin_memory", "CUDA"});
}

TEST(PinnedMemory, DataLoaderWithoutPinningIsUnchanged) {
  TensorDataset data(arange(0, 20, 1, TensorOptions(kFloat32)).view({10, 2}), arange(10));
  for (bool prefetch : {false, true}) {
    DataLoaderOptions options;
    options.batch_size = 4;
    options.prefetch = prefetch;
    DataLoader loader(data, options);
    int64_t seen = 0;
    for (const Example& batch : loader) {
      EXPECT_FALSE(batch.input.is_pinned());
      std::vector<int64_t> targets = batch.target.tolist<int64_t>();
      for (size_t i = 0; i < targets.size(); ++i) EXPECT_EQ(targets[i], seen + int64_t(i));
      seen += int64_t(targets.size());
    }
    EXPECT_EQ(seen, 10);
  }
}

TEST(CudaRuntimeNoGpu, QueriesAnswerSensibly) {
  SKIP_WITH_GPU();
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_FALSE(cuda::is_available());

  cuda::MemoryStats stats = cuda::memory_stats();
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.peak_allocated_bytes, 0u);
  EXPECT_EQ(stats.num_device_mallocs, 0);
  EXPECT_EQ(cuda::memory_allocated(), 0u);
  EXPECT_EQ(cuda::memory_reserved(), 0u);
  EXPECT_EQ(cuda::max_memory_allocated(), 0u);
  cuda::HostMemoryStats host = cuda::host_memory_stats();
  EXPECT_EQ(host.allocated_bytes, 0u);
  EXPECT_EQ(host.num_host_allocs, 0);
  EXPECT_NO_THROW(cuda::empty_cache());
  EXPECT_NO_THROW(cuda::empty_host_cache());
  EXPECT_NO_THROW(cuda::reset_peak_memory_stats());
}

TEST(CudaRuntimeNoGpu, DeviceCallsAreClearErrors) {
  SKIP_WITH_GPU();
  expect_error([] { cuda::current_device(); }, {"current_device", "CUDA"});
  expect_error([] { cuda::set_device(0); }, {"set_device", "CUDA"});
  expect_error([] { cuda::synchronize(); }, {"synchronize", "CUDA"});
  expect_error([] { cuda::get_device_properties(); }, {"get_device_properties", "CUDA"});
  expect_error([] { cuda::mem_get_info(); }, {"mem_get_info", "CUDA"});
  expect_error([] { cuda::DeviceGuard guard(0); }, {"DeviceGuard", "CUDA"});
  // Guards that ask for nothing never touch CUDA.
  EXPECT_NO_THROW({ cuda::DeviceGuard guard(-1); });
  EXPECT_NO_THROW({ cuda::DeviceGuard guard(kCPU); });
}

TEST(CudaRuntimeNoGpu, StreamsAndEvents) {
  SKIP_WITH_GPU();
  expect_error([] { cuda::Stream stream; }, {"Stream", "CUDA"});
  expect_error([] { cuda::Stream::default_stream(); }, {"default_stream", "CUDA"});
  expect_error([] { cuda::current_stream(); }, {"current_stream", "CUDA"});
  // An event is created lazily, so constructing one works; recording it cannot.
  cuda::Event event(true);
  EXPECT_TRUE(event.enable_timing());
  EXPECT_FALSE(event.is_recorded());
  EXPECT_TRUE(event.query());
  EXPECT_NO_THROW(event.synchronize());
  expect_error([&] { event.record(); }, {"CUDA"});
}

TEST(CudaRuntimeNoGpu, CudaTensorsAreAClearError) {
  SKIP_WITH_GPU();
  expect_error([] { empty({4}, kCUDA); }, {"cuda"});
  expect_error([] { ones({4}).to(kCUDA); }, {"cuda"});
}

}  // namespace
}  // namespace tapegrad
