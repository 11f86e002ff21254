// Several threads sharing one set of parameters (a shared embedding, Hogwild-style or data-parallel
// threads): recording ops on a shared leaf and backpropagating into it at once neither crashes nor
// loses a gradient. These run under ThreadSanitizer in CI (tools/run_sanitizers.sh).
//
// Every value here is a small integer, so each sum is exact in any order and the expected
// gradients are exact too.
#include <thread>

#include "support/test_util.h"

namespace tapegrad {
namespace {

constexpr int kThreads = 4;

template <class Body>
void run_threads(int count, const Body& body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) threads.emplace_back([&body, t] { body(t); });
  for (std::thread& thread : threads) thread.join();
}

std::vector<double> values_times(const Tensor& t, double k) {
  std::vector<double> v = testing::values(t);
  for (double& x : v) x *= k;
  return v;
}

// Issue 16, item 2: two threads running backward into one weight lost updates (1600 of 3200) or
// aborted with "pure virtual method called".
TEST(SharedParameters, ConcurrentBackwardIntoOneLeafLosesNothing) {
  // Large enough that two accumulations overlap in time (an unlocked += then loses updates).
  constexpr int kSteps = 200;
  constexpr int64_t kSize = int64_t{1} << 16;
  Tensor w = ones({kSize}).requires_grad_();
  run_threads(kThreads, [&](int) {
    Tensor x = ones({kSize});
    for (int i = 0; i < kSteps; ++i) (w * x).sum().backward();
  });
  Tensor expected = full({kSize}, kThreads * kSteps);
  EXPECT_EQ(sub(w.grad(), expected).abs().max().item(), 0.0);
}

// Forward passes with grad over the same parameters make and drop its gradient accumulator from
// several threads at once (the use-after-free in gradient_edge).
TEST(SharedParameters, ConcurrentForwardWithGradOverOneLeaf) {
  constexpr int kSteps = 500;
  Tensor w = ones({8}).requires_grad_();
  Tensor b = zeros({8}).requires_grad_();
  run_threads(kThreads, [&](int t) {
    std::vector<Tensor> kept;
    for (int i = 0; i < kSteps; ++i) {
      Tensor y = (w * static_cast<double>(t + 1) + b).sum();
      if (i % 7 == 0) kept.push_back(y);  // some graphs live on, most are dropped at once
    }
    for (Tensor& y : kept) y.backward();
  });
  // Thread t kept ceil(kSteps / 7) graphs, each adding t + 1 to every element of w's gradient.
  const int kept = (kSteps + 6) / 7;
  double expected_w = 0;
  for (int t = 0; t < kThreads; ++t) expected_w += kept * (t + 1);
  testing::expect_close(w.grad(), std::vector<double>(8, expected_w));
  testing::expect_close(b.grad(), std::vector<double>(8, kept * kThreads));
}

// A module shared by data-parallel threads: each thread's batch adds its own gradient, and the
// total is the sum of what each batch gives alone.
TEST(SharedParameters, SharedLinearAccumulatesEveryThreadsGradient) {
  constexpr int kSteps = 100;
  auto lin = std::make_shared<nn::Linear>(16, 4);
  {
    NoGradGuard no_grad;
    lin->weight.fill_(1.0);
    lin->bias.fill_(0.0);
  }
  auto batch = [](int t) { return full({3, 16}, static_cast<double>(t + 1)); };
  run_threads(kThreads, [&](int t) {
    Tensor x = batch(t);
    for (int i = 0; i < kSteps; ++i) relu(lin->forward(x)).sum().backward();
  });
  Tensor got_w = lin->weight.grad().clone(), got_b = lin->bias.grad().clone();

  lin->zero_grad();
  for (int t = 0; t < kThreads; ++t) relu(lin->forward(batch(t))).sum().backward();
  testing::expect_close(got_w, values_times(lin->weight.grad(), kSteps));
  testing::expect_close(got_b, values_times(lin->bias.grad(), kSteps));
}

// Reading .grad() and clearing it while other threads accumulate is safe (the values seen are
// whatever had arrived; no crash, no torn shared pointer).
TEST(SharedParameters, ReadingAndClearingGradWhileOthersAccumulate) {
  constexpr int kSteps = 300;
  Tensor w = ones({32}).requires_grad_();
  run_threads(kThreads, [&](int t) {
    for (int i = 0; i < kSteps; ++i) {
      if (t == 0) {
        Tensor g = w.grad();
        if (g.defined()) EXPECT_EQ(g.numel(), 32);
        if (i % 50 == 0) w.set_grad(Tensor());
      } else {
        (w * 3.0).sum().backward();
      }
    }
  });
  ASSERT_TRUE(w.grad().defined());
}

}  // namespace
}  // namespace tapegrad
