#include "common/adam_floor.h"

#include <tapegrad/tapegrad.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace tapegrad::bench {

void adam_streams_pass(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    param[i] += g;
    exp_avg[i] += g;
    exp_avg_sq[i] += g;
  }
}

double adam_memory_floor_ms(int64_t parameters, int threads, double budget_s) {
  if (parameters <= 0) return 0;
  Tensor p = zeros({parameters}), g = zeros({parameters}), m = zeros({parameters}), v = zeros({parameters});
  float* pp = static_cast<float*>(p.data_ptr());
  float* mp = static_cast<float*>(m.data_ptr());
  float* vp = static_cast<float*>(v.data_ptr());
  const float* gp = static_cast<const float*>(g.data_ptr());
  using Clock = std::chrono::steady_clock;
  adam_streams_pass(pp, gp, mp, vp, parameters, threads);  // warm-up: pages touched, caches as in a step
  std::vector<double> ms;
  const auto start = Clock::now();
  while (ms.size() < 5 || std::chrono::duration<double>(Clock::now() - start).count() < budget_s) {
    const auto t0 = Clock::now();
    adam_streams_pass(pp, gp, mp, vp, parameters, threads);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace tapegrad::bench
