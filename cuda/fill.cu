// fill: a grid-stride kernel writing one value into a contiguous tensor.
#include <cstdint>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "launch.h"

namespace tapegrad::cuda_backend {

namespace {

template <class T>
__global__ void fill_kernel(T* out, int64_t n, T value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class T>
void launch_fill(const Tensor& out, T value) {
  const int64_t n = out.numel();
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  fill_kernel<T><<<blocks, threads>>>(static_cast<T*>(out.data_ptr()), n, value);
  TG_CUDA_CHECK_LAUNCH("fill");
}

}  // namespace

// Overwrites out (contiguous).
void fill(const Tensor& out, double value) {
  TG_CHECK(out.is_contiguous(), "fill: the cuda backend fills only contiguous tensors so far");
  switch (out.dtype()) {
    case DType::Float32: launch_fill<float>(out, static_cast<float>(value)); return;
    case DType::Float64: launch_fill<double>(out, value); return;
    case DType::Int32: launch_fill<int32_t>(out, static_cast<int32_t>(value)); return;
    case DType::Int64: launch_fill<int64_t>(out, static_cast<int64_t>(value)); return;
    case DType::Bool: launch_fill<bool>(out, value != 0); return;
    default: TG_CHECK(false, "fill: no cuda kernel for dtype ", out.dtype(), " yet");
  }
}

}  // namespace tapegrad::cuda_backend
