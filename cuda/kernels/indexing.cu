// index_select / index_add / gather / scatter_add on the GPU, and the standalone value check. As
// on the CPU, every tensor is contiguous (the ops make them so) and viewed around `dim` as
// [outer, extent, inner], and indices are int64. One thread per element of the indexed side; the
// accumulating ops use atomicAdd because repeated indices send several elements to one place.
// The ops do not check the indices on the host (Note [deferred checks]): a kernel skips an
// out-of-range index (a selected element reads as 0) and reports it on the device.
#include <climits>
#include <cstdint>

#include "backend/around_dim.h"
#include "kernels/device_checks.cuh"
#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "register.h"
#include "runtime/cuda_check.h"
#include "runtime/device_checks.h"

namespace tapegrad::cuda_backend {

using backend::Around;
using backend::around;

namespace {

// out[o, k, i] = x[o, index[k], i] for out [outer, count, inner], x [outer, extent, inner]. Moves
// raw words of the element size, so every dtype shares one kernel.
template <class Word>
__global__ void index_select_kernel(const Word* x, const int64_t* index, Word* out, int64_t n, int64_t count,
                                    int64_t extent, int64_t inner, CheckSite site) {
  TG_GRID_STRIDE_LOOP(e, n) {
    const int64_t row = e / inner, i = e - row * inner;
    const int64_t o = row / count, k = row - o * count;
    const int64_t j = index[k];
    if (j < 0 || j >= extent) {
      out[e] = Word(0);
      if (o == 0 && i == 0) report_bad_value(site, j, k);
      continue;
    }
    out[e] = x[(o * extent + j) * inner + i];
  }
}

// out[o, j, i] = x[o, index[o, j, i], i] for index and out [outer, index_extent, index_inner].
template <class Word>
__global__ void gather_kernel(const Word* x, const int64_t* index, Word* out, int64_t n, int64_t index_extent,
                              int64_t index_inner, int64_t x_extent, int64_t x_inner, CheckSite site) {
  TG_GRID_STRIDE_LOOP(e, n) {
    const int64_t row = e / index_inner, i = e - row * index_inner;
    const int64_t o = row / index_extent;
    const int64_t j = index[e];
    if (j < 0 || j >= x_extent) {
      out[e] = Word(0);
      report_bad_value(site, j, e);
      continue;
    }
    out[e] = x[(o * x_extent + j) * x_inner + i];
  }
}

// Element-size dispatch for the pure moves: f(TypeTag<Word>) with an unsigned word of the size.
template <class F>
void dispatch_word(size_t itemsize, const char* op, F&& f) {
  switch (itemsize) {
    case 1:
      f(TypeTag<uint8_t>{});
      return;
    case 2:
      f(TypeTag<uint16_t>{});
      return;
    case 4:
      f(TypeTag<uint32_t>{});
      return;
    case 8:
      f(TypeTag<uint64_t>{});
      return;
    default:
      TG_ASSERT(false, op, ": no element type of ", itemsize, " bytes");
  }
}

// *address += value, safe when several threads hit one address (sm_80+ for bfloat16; the build
// targets sm_90). Integers wrap like the CPU's two's-complement adds.
__device__ __forceinline__ void atomic_add(float* address, float value) {
  atomicAdd(address, value);
}
__device__ __forceinline__ void atomic_add(double* address, double value) {
  atomicAdd(address, value);
}
__device__ __forceinline__ void atomic_add(__half* address, __half value) {
  atomicAdd(address, value);
}
__device__ __forceinline__ void atomic_add(__nv_bfloat16* address, __nv_bfloat16 value) {
  atomicAdd(address, value);
}
__device__ __forceinline__ void atomic_add(int32_t* address, int32_t value) {
  atomicAdd(address, value);
}
__device__ __forceinline__ void atomic_add(int64_t* address, int64_t value) {
  static_assert(sizeof(int64_t) == sizeof(unsigned long long), "64-bit atomics");
  atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(value));
}

// out[o, index[k], i] += src[o, k, i] for src [outer, count, inner], out [outer, extent, inner].
template <class T>
__global__ void index_add_kernel(T* out, const int64_t* index, const T* src, int64_t n, int64_t count, int64_t extent,
                                 int64_t inner, CheckSite site) {
  TG_GRID_STRIDE_LOOP(e, n) {
    const int64_t row = e / inner, i = e - row * inner;
    const int64_t o = row / count, k = row - o * count;
    const int64_t j = index[k];
    if (j < 0 || j >= extent) {
      if (o == 0 && i == 0) report_bad_value(site, j, k);
      continue;
    }
    atomic_add(out + (o * extent + j) * inner + i, src[e]);
  }
}

// out[o, index[o, j, i], i] += src[o, j, i] for src and index [outer, index_extent, index_inner].
template <class T>
__global__ void scatter_add_kernel(T* out, const int64_t* index, const T* src, int64_t n, int64_t index_extent,
                                   int64_t index_inner, int64_t out_extent, int64_t out_inner, CheckSite site) {
  TG_GRID_STRIDE_LOOP(e, n) {
    const int64_t row = e / index_inner, i = e - row * index_inner;
    const int64_t o = row / index_extent;
    const int64_t j = index[e];
    if (j < 0 || j >= out_extent) {
      report_bad_value(site, j, e);
      continue;
    }
    atomic_add(out + (o * out_extent + j) * out_inner + i, src[e]);
  }
}

// values[e] must lie in [0, limit) or equal the site's ignore_index.
__global__ void check_values_kernel(const int64_t* values, int64_t n, CheckSite site) {
  TG_GRID_STRIDE_LOOP(e, n) {
    const int64_t v = values[e];
    if ((v < 0 || v >= site.limit) && v != site.ignore_index) report_bad_value(site, v, e);
  }
}

void check_layout(const char* op, const Tensor& a, const Tensor& index, const Tensor& b) {
  TG_ASSERT(a.is_contiguous() && index.is_contiguous() && b.is_contiguous(), op, ": expected contiguous tensors");
  TG_ASSERT(index.dtype() == kInt64 && a.dtype() == b.dtype(), op, ": expected int64 indices and one data dtype");
}

// The site for a launch of this thread's current stream on `device`: no record for DeviceCheck::None.
CheckSite site_for(backend::DeviceCheck check, int device, cudaStream_t stream, int64_t limit,
                   int64_t ignore_index = INT64_MIN) {
  CheckSite site;
  if (check == backend::DeviceCheck::None) return site;
  site.record = error_record(device, stream);
  site.check = static_cast<int32_t>(check);
  site.limit = limit;
  site.ignore_index = ignore_index;
  return site;
}

// Overwrites out. x, index (1-D) and out contiguous.
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, backend::DeviceCheck check) {
  check_layout("index_select", x, index, out);
  const int64_t n = out.numel();
  if (n == 0) return;
  const Around a = around(x.sizes(), dim);
  const int64_t count = index.numel();
  cuda::DeviceGuard guard(out.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  const CheckSite site = site_for(check, out.device().index(), stream, a.extent);
  dispatch_word(x.itemsize(), "index_select", [&](auto tag) {
    using Word = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, stream, index_select_kernel<Word>)
    (static_cast<const Word*>(x.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
     static_cast<Word*>(out.data_ptr()), n, count, a.extent, a.inner, site);
    TG_CUDA_CHECK_LAUNCH("index_select");
  });
}

// Accumulates: out[.., index[k], ..] += src[.., k, ..]. out, index (1-D) and src contiguous.
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, backend::DeviceCheck check) {
  check_layout("index_add", out, index, src);
  const int64_t n = src.numel();
  if (n == 0) return;
  const Around a = around(out.sizes(), dim);
  const int64_t count = index.numel();
  cuda::DeviceGuard guard(out.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  const CheckSite site = site_for(check, out.device().index(), stream, a.extent);
  dispatch_numeric(out.dtype(), "index_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, stream, index_add_kernel<T>)
    (static_cast<T*>(out.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
     static_cast<const T*>(src.data_ptr()), n, count, a.extent, a.inner, site);
    TG_CUDA_CHECK_LAUNCH("index_add");
  });
}

// Overwrites out (index's shape). x, index and out contiguous.
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, backend::DeviceCheck check) {
  check_layout("gather", x, index, out);
  TG_ASSERT(out.sizes() == index.sizes());
  const int64_t n = out.numel();
  if (n == 0) return;
  const Around xa = around(x.sizes(), dim), ia = around(index.sizes(), dim);
  cuda::DeviceGuard guard(out.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  const CheckSite site = site_for(check, out.device().index(), stream, xa.extent);
  dispatch_word(x.itemsize(), "gather", [&](auto tag) {
    using Word = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, stream, gather_kernel<Word>)
    (static_cast<const Word*>(x.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
     static_cast<Word*>(out.data_ptr()), n, ia.extent, ia.inner, xa.extent, xa.inner, site);
    TG_CUDA_CHECK_LAUNCH("gather");
  });
}

// Accumulates: out[.., index[..], ..] += src[..]. out, index and src (index's shape) contiguous.
void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, backend::DeviceCheck check) {
  check_layout("scatter_add", out, index, src);
  TG_ASSERT(src.sizes() == index.sizes());
  const int64_t n = src.numel();
  if (n == 0) return;
  const Around oa = around(out.sizes(), dim), ia = around(index.sizes(), dim);
  cuda::DeviceGuard guard(out.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  const CheckSite site = site_for(check, out.device().index(), stream, oa.extent);
  dispatch_numeric(out.dtype(), "scatter_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, stream, scatter_add_kernel<T>)
    (static_cast<T*>(out.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
     static_cast<const T*>(src.data_ptr()), n, ia.extent, ia.inner, oa.extent, oa.inner, site);
    TG_CUDA_CHECK_LAUNCH("scatter_add");
  });
}

// Reports the first value outside [0, limit) other than ignore_index as `check`; never waits.
void check_values(const Tensor& values, int64_t limit, int64_t ignore_index, backend::DeviceCheck check) {
  TG_ASSERT(values.is_contiguous() && values.dtype() == kInt64, "check_values: expected contiguous int64 values");
  const int64_t n = values.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(values.device());
  cudaStream_t stream = current_stream();
  const CheckSite site = site_for(check, values.device().index(), stream, limit, ignore_index);
  TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, stream, check_values_kernel)
  (static_cast<const int64_t*>(values.data_ptr()), n, site);
  TG_CUDA_CHECK_LAUNCH("check_values");
}

}  // namespace

void register_indexing(backend::KernelTable& table) {
  table.index_select = index_select;
  table.index_add = index_add;
  table.gather = gather;
  table.scatter_add = scatter_add;
  table.check_values = check_values;
}

}  // namespace tapegrad::cuda_backend
