// Device management. The queries (device_count, is_available) never fail: no driver, no GPU or a
// driver too old all mean "no devices". Everything else checks its device index and every call.
#include <cuda_runtime.h>

#include <cstdio>

#include "runtime/cuda_check.h"
#include "runtime/device_checks.h"
#include "runtime/runtime.h"
#include "tapegrad/cuda/counters.h"

namespace tapegrad::cuda {

int device_count() {
  // Asked once: the answer cannot change while the process runs, and ops ask it often.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky status so later calls start clean
      return 0;
    }
    return n;
  }();
  return count;
}

bool is_available() {
  return device_count() > 0;
}

int current_device() {
  return cuda_backend::resolve_device(-1, "cuda::current_device");
}

void set_device(int device) {
  TG_CHECK(device >= 0, "cuda::set_device: invalid device index ", device);
  cuda_backend::resolve_device(device, "cuda::set_device");
  TG_CUDA_CHECK(cudaSetDevice(device), "cuda::set_device");
}

void synchronize(int device) {
  DeviceGuard guard(cuda_backend::resolve_device(device, "cuda::synchronize"));
  note_host_sync();
  TG_CUDA_CHECK(cudaDeviceSynchronize(), "cuda::synchronize");
  cuda_backend::raise_device_errors(current_device(), /*device_wide=*/true);
}

DeviceProperties get_device_properties(int device) {
  int index = cuda_backend::resolve_device(device, "cuda::get_device_properties");
  cudaDeviceProp prop{};
  TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, index), "cuda::get_device_properties");
  DeviceProperties out;
  out.name = prop.name;
  out.total_memory = prop.totalGlobalMem;
  out.multiprocessor_count = prop.multiProcessorCount;
  out.major = prop.major;
  out.minor = prop.minor;
  return out;
}

MemoryInfo mem_get_info(int device) {
  DeviceGuard guard(cuda_backend::resolve_device(device, "cuda::mem_get_info"));
  MemoryInfo info;
  TG_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cuda::mem_get_info");
  return info;
}

DeviceGuard::DeviceGuard(int device) {
  if (device < 0) return;
  cuda_backend::resolve_device(device, "cuda::DeviceGuard");
  original_ = cuda_backend::current_device_index();
  device_ = device;
  if (original_ != device_) TG_CUDA_CHECK(cudaSetDevice(device_), "cuda::DeviceGuard");
}

DeviceGuard::~DeviceGuard() {
  // Restoring cannot fail for a device that was current a moment ago; a destructor must not throw.
  if (original_ >= 0 && original_ != device_) (void)cudaSetDevice(original_);
}

}  // namespace tapegrad::cuda

namespace tapegrad::cuda_backend {

int current_device_index() {
  TG_CHECK(cuda::is_available(), "cuda: no CUDA device is available (device_count() == 0)");
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device), "cuda::current_device");
  return device;
}

int resolve_device(int device, const char* where) {
  int count = cuda::device_count();
  TG_CHECK(count > 0, where, ": no CUDA device is available (device_count() == 0)");
  if (device == -1) return current_device_index();
  TG_CHECK(device >= 0 && device < count, where, ": invalid device index ", device, " (", count,
           count == 1 ? " device" : " devices", " present)");
  return device;
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%zu bytes", bytes);
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  }
  return text;
}

}  // namespace tapegrad::cuda_backend
