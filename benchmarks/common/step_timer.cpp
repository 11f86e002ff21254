// The one step-timing rule shared by the sweep and the training-step benchmarks.
#include "step_timer.h"

#include <algorithm>
#include <cmath>

namespace tapegrad::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

StepTiming time_steps(const std::function<void()>& step, const std::function<void()>& sync, const TimingPlan& plan) {
  // The warm-up's last step, timed on its own, sizes the blocks.
  for (int i = 0; i + 1 < plan.warmup_steps; ++i) step();
  sync();
  Stopwatch probe;
  step();
  sync();
  const double estimate = std::max(probe.seconds(), 1e-7);

  const int steps_per_block = std::max(1, static_cast<int>(std::ceil(plan.min_block_s / estimate)));
  const double block_s = estimate * steps_per_block;
  // A step far over budget is measured once; everything else at least min_samples times.
  int samples = static_cast<int>(plan.budget_s / block_s);
  samples = block_s > 4 * plan.budget_s ? 1 : std::clamp(samples, plan.min_samples, plan.max_samples);

  std::vector<double> per_step_ms;
  for (int s = 0; s < samples; ++s) {
    Stopwatch block;
    for (int i = 0; i < steps_per_block; ++i) step();
    sync();
    per_step_ms.push_back(1e3 * block.seconds() / steps_per_block);
  }
  StepTiming t;
  t.median_ms = median(per_step_ms);
  t.min_ms = *std::min_element(per_step_ms.begin(), per_step_ms.end());
  t.samples = samples;
  t.steps = samples * steps_per_block;
  return t;
}

}  // namespace tapegrad::bench
