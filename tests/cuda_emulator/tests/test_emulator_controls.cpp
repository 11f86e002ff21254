// Negative controls for the CUDA emulator: planted bugs of the kinds it exists to catch, each
// beside the same code without the bug. A test here passes by showing that the harness fails
// the buggy version: a kernel writing one element past its buffer, a kernel reading shared memory
// without the barrier before it, a GEMM with a wrong leading dimension, a result read on a second
// stream without waiting for the first, the launch rules of sm_90, and cooperative grids (another
// block's data read without the grid barrier, a barrier some threads skip, a grid too large).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cooperative_groups.h"
#include "cublas_v2.h"
#include "cuda_emulator/control.h"
#include "cuda_runtime.h"

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// The next synchronising call fails, and the emulator says why.
void expect_violation(const std::string& words) {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(tapegrad_emu::last_violation().find(words), std::string::npos)
      << "violation: " << tapegrad_emu::last_violation() << "\nexpected it to mention: " << words;
  (void)cudaGetLastError();
}

float* device_floats(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
  return static_cast<float*>(p);
}

std::vector<float> to_host(const float* d, size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// i < n is right; the planted bug is i <= n.
__global__ void fill_ones(float* out, int n, bool off_by_one) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n || (off_by_one && i == n)) out[i] = 1.0f;
}

TEST(EmulatorControls, WriteOnePastTheEndIsCaught) {
  const int n = 100;
  float* buffer = device_floats(n);
  TG_LAUNCH_KERNEL(1, 128, 0, nullptr, fill_ones)(buffer, n, false);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the control: no bug, no report
  if (kAddressSanitizer) {
    // The space past each allocation is poisoned: AddressSanitizer stops the write itself.
    EXPECT_DEATH(
        {
          TG_LAUNCH_KERNEL(1, 128, 0, nullptr, fill_ones)(buffer, n, true);
          (void)cudaDeviceSynchronize();
        },
        "AddressSanitizer");
  } else {
    TG_LAUNCH_KERNEL(1, 128, 0, nullptr, fill_ones)(buffer, n, true);
    expect_violation("out-of-bounds write");
  }
  EXPECT_EQ(cudaFree(buffer), cudaSuccess);
}

// Each thread writes its slot, then reads its neighbour's: only correct with the barrier between.
__global__ void rotate_through_shared(float* out, bool with_barrier) {
  TG_SHARED_ARRAY(float, slots, 256);
  const unsigned t = threadIdx.x;
  slots[t] = static_cast<float>(t);
  if (with_barrier) __syncthreads();
  out[t] = slots[(t + 1) % blockDim.x];
}

TEST(EmulatorControls, SharedMemoryReadWithoutTheBarrierIsWrong) {
  float* out = device_floats(256);
  auto run = [&](bool with_barrier) {
    TG_LAUNCH_KERNEL(1, 256, 0, nullptr, rotate_through_shared)(out, with_barrier);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    int wrong = 0;
    std::vector<float> got = to_host(out, 256);
    for (unsigned t = 0; t < 256; ++t) wrong += got[t] != static_cast<float>((t + 1) % 256);
    return wrong;
  };
  EXPECT_EQ(run(true), 0);
  EXPECT_GT(run(false), 0) << "a missing barrier went unnoticed";
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

__global__ void early_exit_before_barrier(float* out) {
  if (threadIdx.x == 5) return;  // the bug: this thread never reaches the barrier
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

TEST(EmulatorControls, BarrierNotReachedByEveryThreadIsCaught) {
  float* out = device_floats(64);
  TG_LAUNCH_KERNEL(1, 64, 0, nullptr, early_exit_before_barrier)(out);
  expect_violation("not reached by every thread");
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

// A warp sum; the planted bug shuffles with the full mask after half the warp has left.
__global__ void warp_sum(float* out, bool half_warp_exits) {
  float v = static_cast<float>(threadIdx.x);
  if (half_warp_exits && threadIdx.x >= 16) return;
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  if (threadIdx.x == 0) out[0] = v;
}

TEST(EmulatorControls, ShuffleMaskNamingAnAbsentLaneIsCaught) {
  float* out = device_floats(1);
  TG_LAUNCH_KERNEL(1, 32, 0, nullptr, warp_sum)(out, false);
  EXPECT_EQ(to_host(out, 1)[0], 496.0f);  // the control: 0 + 1 + ... + 31
  TG_LAUNCH_KERNEL(1, 32, 0, nullptr, warp_sum)(out, true);
  expect_violation("does not take part");
  TG_LAUNCH_KERNEL(1, 16, 0, nullptr, warp_sum)(out, false);  // a 16-thread block has no lanes 16..31
  expect_violation("does not exist");
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

__global__ void big_shared(float* out) {
  TG_SHARED_ARRAY(float, too_much, 13000);  // 52,000 bytes
  too_much[threadIdx.x] = 1.0f;
  out[0] = too_much[0];
}

__global__ void nothing(float* out) {
  (void)out;
}

TEST(EmulatorControls, LaunchLimitsOfSm90AreEnforced) {
  float* out = device_floats(1);
  TG_LAUNCH_KERNEL(1, 1025, 0, nullptr, nothing)(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  TG_LAUNCH_KERNEL(dim3(1, 65536), 32, 0, nullptr, nothing)(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  TG_LAUNCH_KERNEL(1, dim3(1, 1, 65), 0, nullptr, nothing)(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  TG_LAUNCH_KERNEL(1, 32, 49 * 1024, nullptr, nothing)(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  TG_LAUNCH_KERNEL(1, 1024, 0, nullptr, nothing)(out);  // the limits themselves are fine
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  TG_LAUNCH_KERNEL(1, 32, 0, nullptr, big_shared)(out);
  expect_violation("48 KiB");
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST(EmulatorControls, PointerArgumentsMustBeTheDevicesMemory) {
  std::vector<float> host(4);
  TG_LAUNCH_KERNEL(1, 1, 0, nullptr, nothing)(host.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorInvalidValue)).find("host memory"), std::string::npos);
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "one emulated device (TAPEGRAD_EMULATOR_DEVICES)";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  float* on_one = device_floats(4);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  TG_LAUNCH_KERNEL(1, 1, 0, nullptr, nothing)(on_one);  // device 0 current, memory of device 1
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorInvalidValue)).find("cuda:1"), std::string::npos);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaFree(on_one), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

__global__ void copy_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i];
}

__global__ void fill_value(float* out, int n, float value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = value;
}

TEST(EmulatorControls, ReadOnASecondStreamWithoutWaitingIsWrong) {
  const int n = 64;
  float* produced = device_floats(n);
  float* consumed = device_floats(n);
  cudaStream_t producer = nullptr, consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t ready = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
  auto run = [&](float value, bool wait) {
    TG_LAUNCH_KERNEL(1, n, 0, producer, fill_value)(produced, n, value);
    EXPECT_EQ(cudaEventRecord(ready, producer), cudaSuccess);
    if (wait) EXPECT_EQ(cudaStreamWaitEvent(consumer, ready, 0), cudaSuccess);
    TG_LAUNCH_KERNEL(1, n, 0, consumer, copy_kernel)(produced, consumed, n);
    EXPECT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
    std::vector<float> got = to_host(consumed, n);
    EXPECT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
    return got[0];
  };
  EXPECT_EQ(run(2.0f, true), 2.0f);  // the control: with the wait, the consumer sees the value
  EXPECT_NE(run(3.0f, false), 3.0f) << "a missing cross-stream wait went unnoticed";
  EXPECT_EQ(cudaEventDestroy(ready), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(producer), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(consumer), cudaSuccess);
  EXPECT_EQ(cudaFree(produced), cudaSuccess);
  EXPECT_EQ(cudaFree(consumed), cudaSuccess);
}

TEST(EmulatorControls, GemmWithAWrongLeadingDimensionFails) {
  const int64_t m = 4, n = 3, k = 5;  // C[m, n] = A[m, k] B[k, n], column-major
  float* a = device_floats(m * k);
  float* b = device_floats(k * n);
  float* c = device_floats(m * n);
  std::vector<float> ha(m * k, 1.0f), hb(k * n, 2.0f);
  ASSERT_EQ(cudaMemcpy(a, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  // The control: right leading dimensions give 5 * 1 * 2 = 10 everywhere.
  ASSERT_EQ(cublasSgemm_64(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, b, k, &zero, c, m),
            CUBLAS_STATUS_SUCCESS);
  for (float v : to_host(c, m * n)) EXPECT_EQ(v, 10.0f);
  // lda below the rows of A breaks cuBLAS's own rule.
  EXPECT_EQ(cublasSgemm_64(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m - 1, b, k, &zero, c, m),
            CUBLAS_STATUS_INVALID_VALUE);
  // lda = k (a row-major habit) passes cuBLAS's rule but reads past A's allocation.
  EXPECT_EQ(cublasSgemm_64(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, k, b, k, &zero, c, m),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).find("does not lie inside"),
            std::string::npos);
  // A transposed B is stored n x k: ldb must cover its n stored rows.
  EXPECT_EQ(cublasSgemm_64(handle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &one, a, m, b, n - 1, &zero, c, m),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
  for (float* p : {a, b, c}) EXPECT_EQ(cudaFree(p), cudaSuccess);
}

// Cooperative grids: block b writes its value, then reads block b + 1's (a cycle over the grid).
__global__ void rotate_through_blocks(float* values, float* out, bool with_grid_barrier) {
  const unsigned b = blockIdx.x;
  if (threadIdx.x == 0) values[b] = static_cast<float>(b);
  if (with_grid_barrier) cooperative_groups::this_grid().sync();
  if (threadIdx.x == 0) out[b] = values[(b + 1) % gridDim.x];
}

TEST(EmulatorControls, AnotherBlocksDataReadWithoutTheGridBarrierIsWrong) {
  const unsigned blocks = 8;
  float* values = device_floats(blocks);
  float* out = device_floats(blocks);
  auto run = [&](bool with_barrier) {
    EXPECT_EQ(cudaMemset(values, 0xff, blocks * sizeof(float)), cudaSuccess);  // poison: NaN
    EXPECT_EQ(TG_LAUNCH_COOPERATIVE_KERNEL(blocks, 64, 0, nullptr, rotate_through_blocks)(values, out, with_barrier),
              cudaSuccess);
    int wrong = 0;
    std::vector<float> got = to_host(out, blocks);
    for (unsigned b = 0; b < blocks; ++b) wrong += got[b] != static_cast<float>((b + 1) % blocks);
    return wrong;
  };
  EXPECT_EQ(run(true), 0);
  EXPECT_GT(run(false), 0) << "a missing grid barrier went unnoticed";
  for (float* p : {values, out}) EXPECT_EQ(cudaFree(p), cudaSuccess);
}

__global__ void grid_barrier_skipped(float* out, unsigned skipping_block) {
  if (blockIdx.x == skipping_block && threadIdx.x == 3) return;  // the bug: one thread leaves early
  cooperative_groups::this_grid().sync();
  out[blockIdx.x] = 1.0f;
}

TEST(EmulatorControls, GridBarrierNotReachedByEveryThreadIsCaught) {
  float* out = device_floats(4);
  ASSERT_EQ(TG_LAUNCH_COOPERATIVE_KERNEL(4, 32, 0, nullptr, grid_barrier_skipped)(out, 4u), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the control: every thread arrives
  ASSERT_EQ(TG_LAUNCH_COOPERATIVE_KERNEL(4, 32, 0, nullptr, grid_barrier_skipped)(out, 2u), cudaSuccess);
  expect_violation("grid.sync() is not reached by every thread");
  // Outside a cooperative launch the grid barrier is itself the bug.
  TG_LAUNCH_KERNEL(4, 32, 0, nullptr, grid_barrier_skipped)(out, 4u);
  expect_violation("not launched cooperatively");
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

__global__ void cooperative_nothing(float* out) {
  (void)out;
}

TEST(EmulatorControls, CooperativeGridsMustFitOnTheDevice) {
  float* out = device_floats(1);
  int per_sm = 0;
  ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cooperative_nothing, 1024, 0), cudaSuccess);
  EXPECT_EQ(per_sm, 2);  // 2048 threads per multiprocessor
  ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cooperative_nothing, 64, 100 * 1024), cudaSuccess);
  EXPECT_EQ(per_sm, 0);  // above 48 KiB without the opt-in: cannot launch at all
  ASSERT_EQ(cudaFuncSetAttribute(cooperative_nothing, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
            cudaSuccess);
  ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cooperative_nothing, 64, 100 * 1024), cudaSuccess);
  EXPECT_EQ(per_sm, 2);  // 228 KiB per multiprocessor
  // 132 multiprocessors x 2 blocks fit; one block more does not.
  EXPECT_EQ(TG_LAUNCH_COOPERATIVE_KERNEL(264, 1024, 0, nullptr, cooperative_nothing)(out), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(TG_LAUNCH_COOPERATIVE_KERNEL(265, 1024, 0, nullptr, cooperative_nothing)(out),
            cudaErrorCooperativeLaunchTooLarge);
  EXPECT_EQ(cudaGetLastError(), cudaErrorCooperativeLaunchTooLarge);
  EXPECT_EQ(TG_LAUNCH_COOPERATIVE_KERNEL(265, 64, 100 * 1024, nullptr, cooperative_nothing)(out),
            cudaErrorCooperativeLaunchTooLarge);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

// ---- stream capture (graph.cpp) --------------------------------------------------------------

__global__ void scale_kernel(const float* in, float* out, int n, float factor) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i] * factor;
}

struct CapturedScale {
  cudaStream_t stream = nullptr;
  float* in = nullptr;
  float* out = nullptr;
  int n = 64;
};

CapturedScale make_scale() {
  CapturedScale c;
  EXPECT_EQ(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), cudaSuccess);
  c.in = device_floats(c.n);
  c.out = device_floats(c.n);
  std::vector<float> ones(c.n, 1.0f);
  EXPECT_EQ(cudaMemcpy(c.in, ones.data(), c.n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  return c;
}

void destroy(CapturedScale& c) {
  EXPECT_EQ(cudaFree(c.in), cudaSuccess);
  EXPECT_EQ(cudaFree(c.out), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(c.stream), cudaSuccess);
}

TEST(EmulatorControls, CapturedWorkRunsOnlyOnReplayAndReadsInputsThen) {
  CapturedScale c = make_scale();
  ASSERT_EQ(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ASSERT_EQ(cudaStreamIsCapturing(c.stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  TG_LAUNCH_KERNEL(1, 64, 0, c.stream, scale_kernel)(c.in, c.out, c.n, 3.0f);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(c.stream, &graph), cudaSuccess);
  ASSERT_NE(graph, nullptr);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  // Recorded, not run: out still holds the poison of a fresh allocation.
  for (float v : to_host(c.out, c.n)) EXPECT_TRUE(std::isnan(v));
  ASSERT_EQ(cudaGraphLaunch(exec, c.stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(c.stream), cudaSuccess);
  for (float v : to_host(c.out, c.n)) EXPECT_EQ(v, 3.0f);
  // New input contents, same graph: the replay reads them when it runs.
  std::vector<float> twos(c.n, 2.0f);
  ASSERT_EQ(cudaMemcpy(c.in, twos.data(), c.n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, nullptr), cudaSuccess);  // replay on the legacy stream is allowed
  for (float v : to_host(c.out, c.n)) EXPECT_EQ(v, 6.0f);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  destroy(c);
}

TEST(EmulatorControls, SynchronisingDuringCaptureInvalidatesIt) {
  CapturedScale c = make_scale();
  // The control: the same capture without the synchronisation ends fine.
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  TG_LAUNCH_KERNEL(1, 64, 0, c.stream, scale_kernel)(c.in, c.out, c.n, 3.0f);
  ASSERT_EQ(cudaStreamEndCapture(c.stream, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  // Each of these waits for the capturing stream (or is unsafe in global mode) and breaks it.
  const std::vector<std::pair<const char*, std::function<cudaError_t()>>> syncs = {
      {"cudaStreamSynchronize", [&] { return cudaStreamSynchronize(c.stream); }},
      {"cudaStreamQuery", [&] { return cudaStreamQuery(c.stream); }},
      {"cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); }},
      {"cudaMemcpy",
       [&] {
         float h[4];
         return cudaMemcpy(h, c.out, sizeof h, cudaMemcpyDeviceToHost);
       }},
      {"pageable cudaMemcpyAsync",
       [&] {
         std::vector<float> h(4);
         return cudaMemcpyAsync(h.data(), c.out, 16, cudaMemcpyDeviceToHost, c.stream);
       }},
      {"cudaMalloc",
       [] {
         void* p = nullptr;
         return cudaMalloc(&p, 256);
       }},
  };
  for (const auto& [name, sync] : syncs) {
    SCOPED_TRACE(name);
    ASSERT_EQ(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    TG_LAUNCH_KERNEL(1, 64, 0, c.stream, scale_kernel)(c.in, c.out, c.n, 3.0f);
    EXPECT_EQ(sync(), cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    ASSERT_EQ(cudaStreamIsCapturing(c.stream, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
    // Further work on the stream is refused, and the end says the capture is broken.
    EXPECT_EQ(cudaMemsetAsync(c.out, 0, 16, c.stream), cudaErrorStreamCaptureInvalidated);
    graph = reinterpret_cast<cudaGraph_t>(0x1);
    EXPECT_EQ(cudaStreamEndCapture(c.stream, &graph), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);
    (void)cudaGetLastError();
  }
  // Relaxed mode permits cudaMalloc (it is not captured), as the caching allocator uses it.
  ASSERT_EQ(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  float* extra = device_floats(4);
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
  ASSERT_EQ(cudaStreamEndCapture(c.stream, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaFree(extra), cudaSuccess);
  destroy(c);
}

TEST(EmulatorControls, CaptureRulesForStreamsAndEvents) {
  CapturedScale c = make_scale();
  // The legacy default stream cannot capture.
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  // A forked stream must be joined back before the capture ends.
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t fork = nullptr, join = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  float* doubled = device_floats(c.n);
  for (bool joined : {false, true}) {
    SCOPED_TRACE(joined ? "joined" : "not joined");
    ASSERT_EQ(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    TG_LAUNCH_KERNEL(1, 64, 0, c.stream, scale_kernel)(c.in, c.out, c.n, 3.0f);
    ASSERT_EQ(cudaEventRecord(fork, c.stream), cudaSuccess);
    cudaGraph_t graph = nullptr;
    if (!joined) {
      // An event recorded in the capture may not be waited for on the host: that invalidates it.
      EXPECT_EQ(cudaEventSynchronize(fork), cudaErrorCapturedEvent);
      (void)cudaGetLastError();
      EXPECT_EQ(cudaStreamEndCapture(c.stream, &graph), cudaErrorStreamCaptureInvalidated);
      (void)cudaGetLastError();
      ASSERT_EQ(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
      TG_LAUNCH_KERNEL(1, 64, 0, c.stream, scale_kernel)(c.in, c.out, c.n, 3.0f);
      ASSERT_EQ(cudaEventRecord(fork, c.stream), cudaSuccess);
    }
    ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);  // side joins the capture
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    ASSERT_EQ(cudaStreamIsCapturing(side, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);
    TG_LAUNCH_KERNEL(1, 64, 0, side, scale_kernel)(c.out, doubled, c.n, 2.0f);
    if (joined) {
      ASSERT_EQ(cudaEventRecord(join, side), cudaSuccess);
      ASSERT_EQ(cudaStreamWaitEvent(c.stream, join, 0), cudaSuccess);
      ASSERT_EQ(cudaStreamEndCapture(c.stream, &graph), cudaSuccess);
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, graph, 0), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, c.stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(c.stream), cudaSuccess);
      for (float v : to_host(doubled, c.n)) EXPECT_EQ(v, 6.0f);
      EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
      EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    } else {
      EXPECT_EQ(cudaStreamEndCapture(c.stream, &graph), cudaErrorStreamCaptureUnjoined);
      EXPECT_EQ(graph, nullptr);
      (void)cudaGetLastError();
    }
    ASSERT_EQ(cudaStreamIsCapturing(side, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  }
  EXPECT_EQ(cudaFree(doubled), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(fork), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(join), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
  destroy(c);
}

TEST(EmulatorControls, ReplayOfFreedMemoryIsCaught) {
  CapturedScale c = make_scale();
  ASSERT_EQ(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  TG_LAUNCH_KERNEL(1, 64, 0, c.stream, scale_kernel)(c.in, c.out, c.n, 3.0f);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(c.stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, c.stream), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the control: memory alive, no report
  ASSERT_EQ(cudaFree(c.out), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, c.stream), cudaSuccess);
  expect_violation("no longer inside a live allocation");
  c.out = device_floats(1);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  destroy(c);
}

}  // namespace
