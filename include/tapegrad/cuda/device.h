// CUDA device management: which GPU is current, what it is, and waiting for it.
//
// Every function here answers or throws a tapegrad::Error naming the function; none needs a CUDA
// header. On a machine without a GPU, or a build without CUDA, device_count() is 0, is_available()
// is false, and the functions that need a device throw ("no CUDA device is available").
//
// Multi-GPU: allocation and host<->device copies always use the device of the tensor involved,
// but kernels launch on the *current* device. To run ops on tensors living on cuda:N with N > 0,
// make that device current first:
//
//   tapegrad::cuda::DeviceGuard guard(1);  // cuda:1 is current until guard goes out of scope
//   Tensor y = relu(x_on_cuda1);
#pragma once

#include <cstddef>
#include <string>

#include "tapegrad/core/device.h"  // cuda::device_count(), cuda::is_available()

namespace tapegrad::cuda {

// The calling thread's current device index. Throws when no device is available.
int current_device();
// Makes `device` current for the calling thread. Throws for an index outside [0, device_count()).
void set_device(int device);
// Blocks until every stream of `device` (-1: the current device) has finished its work.
void synchronize(int device = -1);

struct DeviceProperties {
  std::string name;              // e.g. "NVIDIA H200"
  size_t total_memory = 0;       // bytes of global memory
  int multiprocessor_count = 0;  // SMs
  int major = 0, minor = 0;      // compute capability, e.g. 9.0
};
// Properties of `device` (-1: the current device). Throws for an invalid index.
DeviceProperties get_device_properties(int device = -1);

struct MemoryInfo {
  size_t free_bytes = 0;  // free on the device now (all processes), as the driver reports it
  size_t total_bytes = 0;
};
// The driver's view of `device`'s memory (-1: the current device). Memory cached by tapegrad's
// allocator counts as used here; see tapegrad/cuda/memory.h for the allocator's own numbers.
MemoryInfo mem_get_info(int device = -1);

// Makes a device current for the lifetime of the guard and restores the previous one after.
// DeviceGuard(-1) and DeviceGuard(a CPU Device) do nothing and never touch CUDA, so code can
// guard on `tensor.device()` whatever the tensor's device. Throws for an invalid index.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  explicit DeviceGuard(Device device) : DeviceGuard(device.is_cuda() ? device.index() : -1) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // The device that was current before the guard (-1 when the guard does nothing).
  int original_device() const { return original_; }

 private:
  int original_ = -1;
  int device_ = -1;
};

}  // namespace tapegrad::cuda
