// Thread settings: one process-wide count for our OpenMP loops and OpenBLAS (its OpenMP build).
// omp_set_num_threads alone would only reach the calling thread's OpenMP state.
#include "tapegrad/runtime.h"

#include <omp.h>

#include <atomic>

#include "tapegrad/core/error.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace tapegrad {

namespace {
std::atomic<int> g_num_threads{0};  // 0: OpenMP's default (OMP_NUM_THREADS or the core count)
}

void set_num_threads(int threads) {
  TG_CHECK(threads >= 1, "set_num_threads: expected a thread count >= 1, got ", threads);
  g_num_threads.store(threads);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int get_num_threads() {
  int threads = g_num_threads.load();
  return threads > 0 ? threads : omp_get_max_threads();
}

}  // namespace tapegrad
