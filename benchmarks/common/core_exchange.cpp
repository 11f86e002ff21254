#include "common/core_exchange.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tapegrad::bench {

namespace {

void pause() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// One run of `rounds` round trips between threads 0 and 1 of a team of two; ns per round trip.
double one_run(int rounds) {
  struct alignas(64) Slot {
    std::atomic<int> value{0};
  };
  Slot ping, pong;
  double ns = 0.0;
  bool paired = false;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_num_threads() == 2) {
      if (omp_get_thread_num() == 0) {
        paired = true;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 1; i <= rounds; ++i) {
          ping.value.store(i, std::memory_order_release);
          while (pong.value.load(std::memory_order_acquire) < i) pause();
        }
        ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / rounds;
      } else {
        for (int i = 1; i <= rounds; ++i) {
          while (ping.value.load(std::memory_order_acquire) < i) pause();
          pong.value.store(i, std::memory_order_release);
        }
      }
    }
  }
  return paired ? ns : 0.0;
}

}  // namespace

double core_exchange_ns() {
  if (omp_get_max_threads() < 2 || omp_get_num_procs() < 2) return 0.0;
  std::vector<double> runs;
  for (int run = 0; run < 5; ++run) runs.push_back(one_run(2000));  // about 1 ms in all
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

const char* core_exchange_state(double ns) {
  if (ns <= 0.0) return "";
  return ns < kSharedCacheMaxNs ? "one L3" : "two L3s";
}

}  // namespace tapegrad::bench
