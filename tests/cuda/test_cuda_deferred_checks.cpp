// Deferred value checks on a CUDA device (tapegrad/cuda/checks.h): a bad target, index or length
// raises nothing and waits for nothing when the op is called, and the op's usual message is raised
// at the next synchronising call (item(), a copy to the CPU, cuda::synchronize(),
// Stream::synchronize()); with sync checks on, the op raises at once. CPU tensors raise at once
// either way. The GPU cases skip where no device is present.
#include <cstdlib>
#include <string>

#include "support/gpu.h"
#include "support/test_util.h"
#include "tapegrad/cuda/checks.h"
#include "tapegrad/cuda/counters.h"

namespace tapegrad {
namespace {

const Device kGpu(DeviceKind::CUDA, 0);

// Sets the sync-checks mode for one test and restores it after.
class SyncChecks {
 public:
  explicit SyncChecks(bool on) : saved_(cuda::sync_checks()) { cuda::set_sync_checks(on); }
  ~SyncChecks() { cuda::set_sync_checks(saved_); }

 private:
  bool saved_;
};

using testing::error_of;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Tensor logits_on(Device device) {
  return randn({4, 10}).to(device);
}
Tensor bad_targets(Device device) {
  return tensor<int64_t>({1, 0, 12, 3}).to(device);
}

const char* kCrossEntropyMessage = "cross_entropy: target 12 at position 2 is out of range for 10 classes";

TEST(DeferredChecks, CrossEntropyRaisesAtTheNextSync) {
  SKIP_WITHOUT_GPU();
  SyncChecks mode(false);
  Tensor logits = logits_on(kGpu), target = bad_targets(kGpu);
  cuda::Counters before = cuda::counters();
  Tensor loss;
  ASSERT_NO_THROW(loss = cross_entropy(logits, target));
  // Without the caching allocator each cudaFree waits for the device (the sanitizer runs turn it off
  // and run this test again with it on).
  if (cuda::caching_allocator_enabled())
    EXPECT_EQ((cuda::counters() - before).host_syncs, 0u) << "the op must not wait for the GPU";
  const std::string message = error_of([&] { (void)loss.item(); });
  EXPECT_TRUE(contains(message, kCrossEntropyMessage)) << message;
  EXPECT_TRUE(contains(message, "or ignore_index -100")) << message;
  // The record was cleared: good targets afterwards raise nothing.
  Tensor good = tensor<int64_t>({1, 0, 9, 3}).to(kGpu);
  EXPECT_NO_THROW((void)cross_entropy(logits, good).item());
}

TEST(DeferredChecks, EachSynchronisingCallRaises) {
  SKIP_WITHOUT_GPU();
  SyncChecks mode(false);
  Tensor logits = logits_on(kGpu), target = bad_targets(kGpu);
  (void)cross_entropy(logits, target);
  EXPECT_TRUE(contains(error_of([] { cuda::synchronize(); }), kCrossEntropyMessage));
  EXPECT_EQ(error_of([] { cuda::synchronize(); }), "") << "raised once, then cleared";

  (void)cross_entropy(logits, target);
  EXPECT_TRUE(contains(error_of([] { cuda::current_stream().synchronize(); }), kCrossEntropyMessage));

  cuda::Stream side;
  {
    cuda::StreamGuard guard(side);
    (void)cross_entropy(logits, target);
  }
  EXPECT_TRUE(contains(error_of([&] { side.synchronize(); }), kCrossEntropyMessage));

  (void)cross_entropy(logits, target);
  EXPECT_TRUE(contains(error_of([&] { (void)logits.to(kCPU); }), kCrossEntropyMessage));
}

TEST(DeferredChecks, IgnoredTargetsAndTheMeanMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  SyncChecks mode(false);
  // The mean's divisor (rows not ignored) is counted on the device: 3 of 4 here.
  Tensor logits_cpu = randn({4, 10}), target_cpu = tensor<int64_t>({1, -100, 7, 3});
  Tensor lc = logits_cpu.clone().requires_grad_(true), lg = logits_cpu.to(kGpu).requires_grad_(true);
  Tensor cpu_loss = cross_entropy(lc, target_cpu), gpu_loss = cross_entropy(lg, target_cpu.to(kGpu));
  EXPECT_NEAR(gpu_loss.item(), cpu_loss.item(), 1e-6);
  cpu_loss.backward();
  gpu_loss.backward();
  std::vector<double> gc = testing::values(lc.grad()), gg = testing::values(lg.grad().to(kCPU));
  ASSERT_EQ(gc.size(), gg.size());
  for (size_t i = 0; i < gc.size(); ++i) EXPECT_NEAR(gg[i], gc[i], 1e-6) << i;
  Tensor log_probs = log_softmax(logits_cpu, 1);
  EXPECT_NEAR(nll_loss(log_probs.to(kGpu), target_cpu.to(kGpu)).item(), nll_loss(log_probs, target_cpu).item(), 1e-6);
}

TEST(DeferredChecks, NllLossAndWeightedCrossEntropy) {
  SKIP_WITHOUT_GPU();
  SyncChecks mode(false);
  Tensor log_probs = log_softmax(logits_on(kGpu), 1), target = bad_targets(kGpu);
  Tensor loss = nll_loss(log_probs, target);
  std::string message = error_of([&] { (void)loss.item(); });
  EXPECT_TRUE(contains(message, "nll_loss: target 12 at position 2 is out of range for 10 classes")) << message;

  CrossEntropyOptions weighted;
  weighted.weight = rand({10}).to(kGpu);
  loss = cross_entropy(logits_on(kGpu), target, weighted);
  message = error_of([&] { (void)loss.item(); });
  EXPECT_TRUE(contains(message, kCrossEntropyMessage)) << message;
}

TEST(DeferredChecks, IndexOps) {
  SKIP_WITHOUT_GPU();
  SyncChecks mode(false);
  Tensor x = randn({5, 3}).to(kGpu);
  Tensor bad = tensor<int64_t>({0, 4, 5}).to(kGpu);
  Tensor out = index_select(x, 0, bad);
  std::string message = error_of([&] { (void)out.to(kCPU); });
  EXPECT_TRUE(contains(message, "index_select: index 5 at position 2 is out of range for a dim of size 5")) << message;

  Tensor gather_index = tensor<int64_t>({0, 1, 2, 0, 3, 1}, {2, 3}).to(kGpu);
  out = gather(x.narrow(0, 0, 2), 1, gather_index);
  message = error_of([&] { (void)out.to(kCPU); });
  EXPECT_TRUE(contains(message, "gather: index 3 at position 4 is out of range for a dim of size 3")) << message;

  Tensor weight = randn({6, 2}).to(kGpu);
  out = embedding(weight, tensor<int64_t>({1, -1}, {1, 2}).to(kGpu));
  message = error_of([&] { cuda::synchronize(); });
  EXPECT_TRUE(contains(message, "embedding: index -1 at position 1 is out of range for a dim of size 6")) << message;

  // Negative control: good indices raise nothing, and give the CPU's rows.
  Tensor good = tensor<int64_t>({4, 0}).to(kGpu);
  Tensor rows = index_select(x, 0, good).to(kCPU);
  Tensor expected = index_select(x.to(kCPU), 0, good.to(kCPU));
  EXPECT_EQ(testing::values(rows), testing::values(expected));
}

TEST(DeferredChecks, LstmLengths) {
  SKIP_WITHOUT_GPU();
  SyncChecks mode(false);
  const int64_t steps = 5, batch = 2, hidden = 3;
  auto on_gpu = [&](const Shape& s) { return randn(s).to(kGpu); };
  Tensor lengths = tensor<int64_t>({5, 6}).to(kGpu);
  LstmLayerOutput r =
      lstm_layer(on_gpu({steps, batch, 4}), on_gpu({batch, hidden}), on_gpu({batch, hidden}), on_gpu({4 * hidden, 4}),
                 on_gpu({4 * hidden, hidden}), on_gpu({4 * hidden}), on_gpu({4 * hidden}), lengths);
  const std::string message = error_of([&] { (void)r.output.to(kCPU); });
  EXPECT_TRUE(contains(message, "lstm: sequence length 6 is outside [0, 5]")) << message;
}

// With sync checks on, every op raises at once, and reads its values back (a host sync).
TEST(DeferredChecks, SyncChecksRaiseAtOnce) {
  SKIP_WITHOUT_GPU();
  SyncChecks mode(true);
  Tensor logits = logits_on(kGpu), target = bad_targets(kGpu);
  cuda::Counters before = cuda::counters();
  std::string message = error_of([&] { (void)cross_entropy(logits, target); });
  EXPECT_TRUE(contains(message, kCrossEntropyMessage)) << message;
  EXPECT_GE((cuda::counters() - before).host_syncs, 1u) << "negative control for the deferred case's zero";
  message = error_of([&] { (void)nll_loss(log_softmax(logits, 1), target); });
  EXPECT_TRUE(contains(message, "nll_loss: target 12 at position 2")) << message;
  Tensor x = randn({5, 3}).to(kGpu);
  message = error_of([&] { (void)index_select(x, 0, tensor<int64_t>({0, 5}).to(kGpu)); });
  EXPECT_TRUE(contains(message, "index_select: index 5 at position 1")) << message;
  message = error_of([&] { (void)embedding(x, tensor<int64_t>({7}).to(kGpu)); });
  EXPECT_TRUE(contains(message, "embedding: index 7 at position 0")) << message;
  EXPECT_EQ(error_of([] { cuda::synchronize(); }), "") << "nothing left to raise later";
}

// Under TAPEGRAD_CUDA_SYNC_CHECKS=1 (ctest runs this case a second time with it set) the default
// mode is the immediate one.
TEST(DeferredChecks, FollowsTheEnvironment) {
  SKIP_WITHOUT_GPU();
  const char* env = std::getenv("TAPEGRAD_CUDA_SYNC_CHECKS");
  const bool on = env != nullptr && std::string(env) == "1";
  EXPECT_EQ(cuda::sync_checks(), on);
  Tensor logits = logits_on(kGpu), target = bad_targets(kGpu);
  Tensor loss;
  const std::string at_op = error_of([&] { loss = cross_entropy(logits, target); });
  const std::string at_sync = on ? "" : error_of([] { cuda::synchronize(); });
  EXPECT_TRUE(contains(on ? at_op : at_sync, kCrossEntropyMessage)) << at_op << " | " << at_sync;
  EXPECT_EQ(on ? at_sync : at_op, "");
}

// Every build: CPU tensors raise at the op, whatever the mode.
TEST(DeferredChecks, CpuRaisesAtOnce) {
  for (bool on : {false, true}) {
    SyncChecks mode(on);
    Tensor logits = logits_on(kCPU), target = bad_targets(kCPU);
    EXPECT_TRUE(contains(error_of([&] { (void)cross_entropy(logits, target); }), kCrossEntropyMessage));
    EXPECT_TRUE(contains(error_of([&] { (void)nll_loss(logits, target); }), "nll_loss: target 12 at position 2"));
    Tensor x = randn({5, 3});
    EXPECT_TRUE(contains(error_of([&] { (void)index_select(x, 0, tensor<int64_t>({5})); }),
                         "index_select: index 5 at position 0 is out of range for a dim of size 5"));
    EXPECT_TRUE(contains(error_of([&] { (void)embedding(x, tensor<int64_t>({-2})); }), "embedding: index -2"));
  }
}

}  // namespace
}  // namespace tapegrad
