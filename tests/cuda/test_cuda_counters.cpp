// tapegrad::cuda::counters(): exact counts of launches, GEMMs, copies and host synchronisations for
// a known sequence of ops on a CUDA device, and zero for CPU work. In the emulation build, the
// launch count is also checked against the launches the emulated runtime saw, so a kernel launched
// around the counting macro would be caught. The GPU cases skip where no device is present.
#include "support/gpu.h"
#include "support/test_util.h"
#include "tapegrad/cuda/checks.h"
#include "tapegrad/cuda/counters.h"

#ifdef TAPEGRAD_TEST_WITH_EMULATOR
#include "cuda_emulator/control.h"
#endif

namespace tapegrad {
namespace {

const Device kGpu(DeviceKind::CUDA, 0);

struct Delta {
  cuda::Counters start = cuda::counters();
  cuda::Counters get() const { return cuda::counters() - start; }
};

void expect_counts(const cuda::Counters& c, uint64_t launches, uint64_t gemms, uint64_t copies, uint64_t syncs,
                   const char* what) {
  EXPECT_EQ(c.launches, launches) << what;
  EXPECT_EQ(c.gemms, gemms) << what;
  EXPECT_EQ(c.copies, copies) << what;
  EXPECT_EQ(c.host_syncs, syncs) << what;
}

// Every build: CPU work counts nothing, and reset_counters() zeroes the counts.
TEST(CudaCounters, CpuWorkCountsNothing) {
  Delta d;
  Tensor a = randn({8, 8}), b = randn({8, 8});
  Tensor c = add(matmul(a, b), a);
  (void)c.sum().item();
  expect_counts(d.get(), 0, 0, 0, 0, "cpu ops");
  cuda::reset_counters();
  expect_counts(cuda::counters(), 0, 0, 0, 0, "after reset");
}

TEST(CudaCounters, KnownSequenceOnTheGpu) {
  SKIP_WITHOUT_GPU();
  Tensor host_a = randn({16, 8}), host_b = randn({8, 4});
  {
    Delta d;
    Tensor a = host_a.to(kGpu);
    // A pageable upload is staged through pinned memory: one copy, and the host does not wait.
    expect_counts(d.get(), 0, 0, 1, 0, "upload");
  }
  Tensor a = host_a.to(kGpu), b = host_b.to(kGpu);
  {
    Delta d;
    Tensor s = add(a, a);
    expect_counts(d.get(), 1, 0, 0, 0, "add: one kernel");
    Tensor r = relu(s);
    expect_counts(d.get(), 2, 0, 0, 0, "add, relu: two kernels");
  }
  {
    Delta d;
    Tensor p = mm(a, b);
    expect_counts(d.get(), 0, 1, 0, 0, "mm: one cuBLAS call");
    Tensor q = bmm(a.unsqueeze(0).expand({3, 16, 8}).contiguous(), b.unsqueeze(0).expand({3, 8, 4}).contiguous());
    EXPECT_EQ(d.get().gemms, 2u) << "a batched product is one GEMM";
  }
  {
    Tensor p = mm(a, b);
    Delta d;
    Tensor host = p.to(kCPU);
    // Negative control for the zeros above: a download waits for the stream, and is counted.
    expect_counts(d.get(), 0, 0, 1, 1, "download");
    cuda::synchronize();
    EXPECT_EQ(d.get().host_syncs, 2u);
    cuda::current_stream().synchronize();
    EXPECT_EQ(d.get().host_syncs, 3u);
  }
  {
    Tensor p = mm(a, b);
    Delta d;
    Tensor e = empty({0, 4}, TensorOptions().device(kGpu));
    Tensor f = add(e, e);  // nothing to do: no launch
    expect_counts(d.get(), 0, 0, 0, 0, "empty add");
  }
}

#ifdef TAPEGRAD_TEST_WITH_EMULATOR
// Every launch the device saw was counted, over a whole training step (forward, loss, backward,
// Adam): a kernel launched without TG_LAUNCH_KERNEL would make the two differ.
TEST(CudaCounters, EveryEmulatedLaunchIsCounted) {
  SKIP_WITHOUT_GPU();
  nn::Linear fc1(8, 16), fc2(16, 4);
  fc1.to(kGpu);
  fc2.to(kGpu);
  std::vector<Tensor> params = fc1.parameters();
  for (const Tensor& p : fc2.parameters()) params.push_back(p);
  optim::Adam adam(params, optim::AdamOptions(1e-3));
  Tensor x = randn({5, 8}).to(kGpu);
  Tensor y = tensor<int64_t>({0, 1, 2, 3, 1}).to(kGpu);
  const int64_t seen_before = tapegrad_emu::launches_seen();
  Delta d;
  for (int step = 0; step < 2; ++step) {
    adam.zero_grad();
    Tensor loss = cross_entropy(fc2(relu(fc1(x))), y);
    loss.backward();
    adam.step();
  }
  cuda::synchronize();
  const int64_t seen = tapegrad_emu::launches_seen() - seen_before;
  EXPECT_GT(seen, 10);
  EXPECT_EQ(static_cast<int64_t>(d.get().launches), seen);
}
#endif

}  // namespace
}  // namespace tapegrad

namespace tapegrad {
namespace {

// x * 0.5, x + 1, x - 2, x / 4 and x != 3: the number is a kernel argument, so each is one launch
// and no 0-d device tensor is filled first; values and gradients are the CPU's.
TEST(CudaCounters, NumbersAreKernelArguments) {
  SKIP_WITHOUT_GPU();
  Tensor host = randn({6, 5});
  Tensor x = host.to(kGpu).requires_grad_(true), xc = host.clone().requires_grad_(true);
  auto f = [](const Tensor& t) { return div(sub(add(mul(t, 0.5), 1.0), 2.0), 4.0); };
  Delta d;
  Tensor y = f(x);
  EXPECT_EQ(d.get().launches, 4u);
  Tensor mask = ne(y, 3.0);
  EXPECT_EQ(d.get().launches, 5u);
  // Negative control: a power still goes through a 0-d tensor (a fill, then the kernel).
  Tensor p = pow(x.detach(), 3.0);
  EXPECT_EQ(d.get().launches, 7u);
  testing::expect_close(y.to(kCPU), testing::values(f(xc)), 1e-6);
  testing::expect_close(p.to(kCPU), testing::values(pow(host, 3.0)), 1e-5);
  sum(y).backward();
  sum(f(xc)).backward();
  testing::expect_close(x.grad().to(kCPU), testing::values(xc.grad()), 1e-7);
  EXPECT_EQ(testing::values(mask.to(kCPU)), testing::values(ne(f(host), 3.0)));
}

}  // namespace
}  // namespace tapegrad
