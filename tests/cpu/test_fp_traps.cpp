// The CPU backend is built without trapping math (Note [CPU loops without trapping math] in
// CMakeLists.txt): its vector loops may compute, in lanes whose results are discarded, operations
// the source computes only where they are selected. A program that turns on the divide-by-zero and
// invalid-operation traps (feenableexcept, as some do to find where a NaN is born) must still run
// the activations, softmax with cross-entropy and the LSTM (batched and batch 1, forward and
// backward) on finite inputs without a trap. The control: a real division by zero does trap, so the
// traps are on. Each case runs in a child process (a trap kills it with SIGFPE), on one thread: traps
// are per thread, and the pool's threads would not have them.
#include <fenv.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <csignal>
#include <cstdlib>

#include "tapegrad/tapegrad.h"

namespace tapegrad {
namespace {

void with_traps(void (*body)()) {
  set_num_threads(1);
  feenableexcept(FE_DIVBYZERO | FE_INVALID);
  body();
  fedisableexcept(FE_ALL_EXCEPT);
  std::exit(0);
}

void activations_and_loss() {
  Tensor x = mul(randn({300, 37}), 6.0);  // 37: every loop's vector tail too
  Tensor y = add(add(sigmoid(x), tanh(x)), exp(mul(x, 0.1)));
  Tensor loss = cross_entropy(x, randint(0, 37, {300}));
  if (!std::isfinite(sum(y).item<double>()) || !std::isfinite(loss.item<double>())) std::exit(3);
}

void lstm_steps(int64_t batch) {
  nn::LSTM lstm(37, 20);
  Tensor x = mul(randn({9, batch, 37}), 3.0);
  Tensor loss = sum(lstm.forward(x).output);
  loss.backward();
  if (!std::isfinite(loss.item<double>())) std::exit(3);
}

class FloatingPointTraps : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(FloatingPointTraps, ActivationsAndCrossEntropyRaiseNone) {
  EXPECT_EXIT(with_traps(activations_and_loss), ::testing::ExitedWithCode(0), "");
}

TEST_F(FloatingPointTraps, BatchedLstmRaisesNone) {
  EXPECT_EXIT(with_traps([] { lstm_steps(8); }), ::testing::ExitedWithCode(0), "");
}

TEST_F(FloatingPointTraps, BatchOneLstmRaisesNone) {
  EXPECT_EXIT(with_traps([] { lstm_steps(1); }), ::testing::ExitedWithCode(0), "");
}

// Negative control: the traps are really on in the child. Under AddressSanitizer its handler takes
// the SIGFPE, reports it and exits.
#if defined(__SANITIZE_ADDRESS__)
#define TG_TRAP_KILLS_WITH_A_REPORT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_TRAP_KILLS_WITH_A_REPORT 1
#endif
#endif

TEST_F(FloatingPointTraps, ADivisionByZeroTraps) {
  const auto divide_by_zero = [] { (void)div(ones({64}), zeros({64})).sum().item<double>(); };
#if defined(TG_TRAP_KILLS_WITH_A_REPORT)
  EXPECT_EXIT(
      with_traps(divide_by_zero), [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); },
      "AddressSanitizer: FPE");
#else
  EXPECT_EXIT(with_traps(divide_by_zero), ::testing::KilledBySignal(SIGFPE), "");
#endif
}

}  // namespace
}  // namespace tapegrad
