// Times whole training steps the same way on every device: a warm-up, then blocks of steps each
// closed by a device synchronise and measured with a steady clock; a block's time divided by its
// steps is one sample, and the median sample is the answer (robust to a noisy, shared machine).
#pragma once

#include <chrono>
#include <functional>
#include <vector>

namespace tapegrad::bench {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

double median(std::vector<double> values);  // 0 for an empty list

struct TimingPlan {
  double budget_s = 1.0;      // aim for about this much timed work per measurement
  int warmup_steps = 2;       // untimed; the first step allocates and initialises libraries
  double min_block_s = 2e-3;  // make blocks at least this long so a synchronise is amortised
  int min_samples = 3, max_samples = 30;
};

struct StepTiming {
  double median_ms = 0, min_ms = 0;
  int samples = 0, steps = 0;  // timed steps (warm-up not included)
};

// `step` issues one training step; `sync` waits for the device. Both run on the calling thread.
StepTiming time_steps(const std::function<void()>& step, const std::function<void()>& sync, const TimingPlan& plan);

}  // namespace tapegrad::bench
