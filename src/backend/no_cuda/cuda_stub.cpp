// The CUDA entry points of a build without the CUDA backend: no devices, nothing to register.
#include "backend/kernel_table.h"

namespace tapegrad {
namespace cuda {
bool is_available() { return false; }
int device_count() { return 0; }
}  // namespace cuda
namespace backend {
void register_cuda_backend() {}
}  // namespace backend
}  // namespace tapegrad
