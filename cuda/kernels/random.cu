// Philox draws on CUDA: element i of contiguous `out` uses philox4x32_10(offset + i, seed) and the
// transforms of math/philox.h, exactly as the CPU does. A seed therefore gives bit-identical uniform
// and randint tensors on both devices, and normal tensors equal up to the last-ulp differences of
// libm's and CUDA's log/cos/sqrt.
#include "kernels/dispatch.h"
#include "kernels/pointwise_loop.cuh"
#include "math/philox.h"
#include "register.h"

namespace tapegrad::cuda_backend {

namespace {

template <class T>
__global__ void uniform_kernel(T* out, int64_t n, double low, double high, uint64_t seed, uint64_t offset) {
  TG_GRID_STRIDE_LOOP(i, n) {
    math::Philox4 r = math::philox4x32_10(offset + static_cast<uint64_t>(i), seed);
    if constexpr (std::is_same_v<T, float>) {
      out[i] = math::uniform_f32(r, low, high);
    } else {
      out[i] = math::uniform_f64(r, low, high);
    }
  }
}

template <class T>
__global__ void normal_kernel(T* out, int64_t n, double mean, double std, uint64_t seed, uint64_t offset) {
  TG_GRID_STRIDE_LOOP(i, n) {
    out[i] =
        static_cast<T>(math::normal_value(math::philox4x32_10(offset + static_cast<uint64_t>(i), seed), mean, std));
  }
}

template <class T>
__global__ void randint_kernel(T* out, int64_t n, int64_t low, uint64_t range, uint64_t seed, uint64_t offset) {
  TG_GRID_STRIDE_LOOP(i, n) {
    out[i] =
        static_cast<T>(math::randint_value(math::philox4x32_10(offset + static_cast<uint64_t>(i), seed), low, range));
  }
}

void check_contiguous(const char* op, const Tensor& out) {
  TG_CHECK(out.is_contiguous(), op, ": the draw fills a contiguous tensor, got strides ", shape_str(out.strides()));
}

// Overwrites out (f32 or f64, like the CPU).
void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset) {
  check_contiguous("uniform", out);
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(out.device());  // kernels launch on the current device
  dispatch_floating(out.dtype(), "uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(pointwise_grid(n), kBlockThreads, 0, current_stream(), uniform_kernel<T>)
    (static_cast<T*>(out.data_ptr()), n, low, high, seed, offset);
    TG_CUDA_CHECK_LAUNCH("uniform");
  });
}

// Overwrites out (f32 or f64).
void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) {
  check_contiguous("normal", out);
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(out.device());  // kernels launch on the current device
  dispatch_floating(out.dtype(), "normal", [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(pointwise_grid(n), kBlockThreads, 0, current_stream(), normal_kernel<T>)
    (static_cast<T*>(out.data_ptr()), n, mean, std, seed, offset);
    TG_CUDA_CHECK_LAUNCH("normal");
  });
}

// Overwrites out (i32, i64, f32 or f64) with integers on [low, high).
void randint(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t offset) {
  check_contiguous("randint", out);
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(out.device());  // kernels launch on the current device
  const uint64_t range = static_cast<uint64_t>(high - low);
  TG_CHECK(range > 0, "randint: expected low < high, got [", low, ", ", high, ")");
  dispatch_numeric(out.dtype(), "randint", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      TG_CHECK(false, "randint: unsupported dtype ", out.dtype());
    } else {
      TG_LAUNCH_KERNEL(pointwise_grid(n), kBlockThreads, 0, current_stream(), randint_kernel<T>)
      (static_cast<T*>(out.data_ptr()), n, low, range, seed, offset);
      TG_CUDA_CHECK_LAUNCH("randint");
    }
  });
}

}  // namespace

void register_random(backend::KernelTable& table) {
  table.uniform = uniform;
  table.normal = normal;
  table.randint = randint;
}

}  // namespace tapegrad::cuda_backend
