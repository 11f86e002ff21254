// Registers the CUDA backend's kernels, but only where a device is present: on a machine without
// one every slot stays empty and ops say "no cuda kernel for ... (no CUDA backend)".
#include "cuda_kernels.h"

namespace tapegrad::backend {

void register_cuda_backend() {
  if (!cuda::is_available()) return;
  KernelTable& t = mutable_kernels(DeviceKind::CUDA);
  t.allocator = &cuda_backend::device_allocator();
  t.copy = cuda_backend::copy;
  t.copy_from_cpu = cuda_backend::copy_from_cpu;
  t.copy_to_cpu = cuda_backend::copy_to_cpu;
  t.fill = cuda_backend::fill;
}

}  // namespace tapegrad::backend
