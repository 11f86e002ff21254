// The TF32 switch for CUDA GEMMs: a plain flag with no CUDA dependency, so CPU-only builds and
// code that never touches a GPU can set and read it.
#include "tapegrad/cuda/blas_settings.h"

#include <atomic>

namespace tapegrad::cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) {
  g_allow_tf32.store(allow, std::memory_order_relaxed);
}
bool allow_tf32() {
  return g_allow_tf32.load(std::memory_order_relaxed);
}

}  // namespace tapegrad::cuda
