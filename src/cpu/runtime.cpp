// Thread settings: one OpenMP pool shared by our loops and OpenBLAS (its OpenMP build).
#include <omp.h>

#include "tapegrad/core/error.h"
#include "tapegrad/runtime.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace tapegrad {

void set_num_threads(int threads) {
  TG_CHECK(threads >= 1, "set_num_threads: expected a thread count >= 1, got ", threads);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace tapegrad
