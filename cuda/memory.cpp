// Device memory and copies. The allocator here is the plain cudaMalloc one; the caching allocator
// replaces it in the CUDA backend's own work item.
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

namespace tapegrad::cuda_backend {

namespace {
class DeviceAllocator : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr{nullptr, nullptr};
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      TG_CHECK(false, "cuda allocator: cannot allocate ", nbytes, " bytes (", cudaGetErrorString(status), "; ",
               free_bytes, " of ", total_bytes, " bytes free)");
    }
    return DataPtr{ptr, [](void* p) { cudaFree(p); }};
  }
};
}  // namespace

Allocator& device_allocator() {
  static DeviceAllocator allocator;
  return allocator;
}

// Overwrites dst (contiguous, same dtype and shape as the contiguous host tensor).
void copy_from_cpu(const Tensor& src_cpu, const Tensor& dst) {
  TG_CHECK(src_cpu.is_contiguous() && dst.is_contiguous() && src_cpu.dtype() == dst.dtype(),
           "copy to cuda: expected contiguous tensors of one dtype");
  TG_CUDA_CHECK(cudaMemcpy(dst.data_ptr(), src_cpu.data_ptr(), src_cpu.numel() * src_cpu.itemsize(),
                           cudaMemcpyHostToDevice),
                "copy to cuda");
}

// Overwrites dst_cpu.
void copy_to_cpu(const Tensor& src, const Tensor& dst_cpu) {
  TG_CHECK(src.is_contiguous() && dst_cpu.is_contiguous() && src.dtype() == dst_cpu.dtype(),
           "copy to cpu: expected contiguous tensors of one dtype");
  TG_CUDA_CHECK(cudaMemcpy(dst_cpu.data_ptr(), src.data_ptr(), src.numel() * src.itemsize(), cudaMemcpyDeviceToHost),
                "copy to cpu");
}

void register_memory(backend::KernelTable& table) {
  table.allocator = &device_allocator();
  table.copy_from_cpu = copy_from_cpu;
  table.copy_to_cpu = copy_to_cpu;
}

}  // namespace tapegrad::cuda_backend
