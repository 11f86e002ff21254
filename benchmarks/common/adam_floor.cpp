#include "common/adam_floor.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace tapegrad::bench {

void adam_streams_pass(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, int threads) {
#pragma omp parallel for num_threads(std::max(threads, 1)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    param[i] += g;
    exp_avg[i] += g;
    exp_avg_sq[i] += g;
  }
}

AdamStreams::AdamStreams(int64_t parameters)
    : size_(std::max<int64_t>(parameters, 0)),
      param_(randn({size_})),
      grad_(randn({size_})),
      exp_avg_(zeros({size_})),
      exp_avg_sq_(zeros({size_})) {}

void AdamStreams::pass(int threads) {
  adam_streams_pass(static_cast<float*>(param_.data_ptr()), static_cast<const float*>(grad_.data_ptr()),
                    static_cast<float*>(exp_avg_.data_ptr()), static_cast<float*>(exp_avg_sq_.data_ptr()), size_,
                    threads);
}

double adam_memory_floor_ms(int64_t parameters, int threads, double budget_s) {
  if (parameters <= 0) return 0;
  AdamStreams streams(parameters);
  using Clock = std::chrono::steady_clock;
  streams.pass(threads);  // warm-up: pages touched, caches as in a step
  std::vector<double> ms;
  const auto start = Clock::now();
  while (ms.size() < 5 || std::chrono::duration<double>(Clock::now() - start).count() < budget_s) {
    const auto t0 = Clock::now();
    streams.pass(threads);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace tapegrad::bench
