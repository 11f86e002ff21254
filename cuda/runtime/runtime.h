// Internal helpers of the CUDA runtime layer (device.cpp, stream.cpp, the allocators, the copies):
// validated device indices and the current stream of a given device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "tapegrad/cuda/device.h"
#include "tapegrad/cuda/stream.h"

namespace tapegrad::cuda_backend {

// The calling thread's current device (checked cudaGetDevice); throws when no device is available.
int current_device_index();
// `device` itself when it names a present device, the current device for -1; otherwise throws an
// Error starting with `where` ("no CUDA device is available" / "invalid device index").
int resolve_device(int device, const char* where);

// The calling thread's current stream on `device` (a valid index); nullptr is the default stream.
cudaStream_t current_stream(int device);

// "1.50 GiB": sizes in error messages, next to the exact byte count.
std::string format_bytes(size_t bytes);

// A DeviceGuard for code that must not throw (deleters, destructors): errors are cleared and
// ignored, since the caller has no way to report them.
class NoThrowDeviceGuard {
 public:
  explicit NoThrowDeviceGuard(int device) noexcept {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (current == device) return;
    if (cudaSetDevice(device) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    original_ = current;
  }
  ~NoThrowDeviceGuard() {
    if (original_ >= 0 && cudaSetDevice(original_) != cudaSuccess) (void)cudaGetLastError();
  }
  NoThrowDeviceGuard(const NoThrowDeviceGuard&) = delete;
  NoThrowDeviceGuard& operator=(const NoThrowDeviceGuard&) = delete;

 private:
  int original_ = -1;
};

}  // namespace tapegrad::cuda_backend
