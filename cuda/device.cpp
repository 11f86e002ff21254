// Device queries that never fail: no driver, no GPU or a driver too old all mean "no devices".
#include <cuda_runtime.h>

#include "tapegrad/core/device.h"

namespace tapegrad::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky status so later calls start clean
    return 0;
  }
  return count;
}

bool is_available() { return device_count() > 0; }

}  // namespace tapegrad::cuda
