// fill (any strides, every dtype) and arange (contiguous out, numeric dtypes).
#include "kernels/dispatch.h"
#include "kernels/pointwise_loop.cuh"
#include "math/unfused.h"
#include "register.h"

namespace tapegrad::cuda_backend {

namespace {

template <class T>
struct ConstantFn {
  T value;
  __device__ T operator()() const { return value; }
};

template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  TG_GRID_STRIDE_LOOP(i, n) {
    out[i] = convert<T>(math::arange_value(start, step, i));
  }
}

// Overwrites out. The value is converted once on the host, as the CPU converts it.
void fill(const Tensor& out, double value) {
  dispatch_all(out.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_pointwise<T>("fill", ConstantFn<T>{convert<T>(value)}, out);
  });
}

// Overwrites contiguous out with start + i * step (computed in double, unfused, so it matches the
// CPU bit for bit before the conversion to out's dtype).
void arange(const Tensor& out, double start, double step) {
  TG_CHECK(out.is_contiguous(), "arange: expected a contiguous output");
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(out.device());  // kernels launch on the current device
  dispatch_numeric(out.dtype(), "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(pointwise_grid(n), kBlockThreads, 0, current_stream(), arange_kernel<T>)
    (static_cast<T*>(out.data_ptr()), n, start, step);
    TG_CUDA_CHECK_LAUNCH("arange");
  });
}

}  // namespace

void register_fill(backend::KernelTable& table) {
  table.fill = fill;
  table.arange = arange;
}

}  // namespace tapegrad::cuda_backend
