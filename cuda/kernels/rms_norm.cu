// RMS normalisation over the rows of a contiguous [rows, cols] tensor, forward and backward: a
// warp per row up to kWarpRowLimit cols, a block per row beyond, as layer_norm.cu. The weight
// gradient is a column sum over all rows: threads along the columns (coalesced), rows split over
// blockIdx.y into slices whose partials a second kernel adds in a fixed order (no atomics, so
// results repeat run to run). 16-bit floats compute in float; rstd is stored in the compute type.
// The formulas are math/rms_norm.h, shared with the CPU backend.
#include <cstdint>

#include "backend/kernel_tensors.h"
#include "kernels/block_reduce.cuh"
#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "kernels/row_sums.cuh"
#include "math/rms_norm.h"
#include "register.h"
#include "runtime/cuda_check.h"

namespace tapegrad::cuda_backend {

using backend::data_or_null;
using backend::mutable_data_or_null;

namespace {

// y[r, :] from x[r, :]; writes rstd[r]. weight may be null (1).
template <int kThreadsPerRow, class T>
__global__ void rms_norm_kernel(const T* x, const T* weight, Acc<T> eps, T* y, Acc<T>* rstd, int64_t rows,
                                int64_t cols) {
  using Tiling = RowTiling<kThreadsPerRow>;
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, shared, Tiling::kSharedSlots);
  for (int64_t row = Tiling::first_row(); row < rows; row += Tiling::row_step()) {
    const T* in = x + row * cols;
    T* out = y + row * cols;
    C squares = 0;
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) {
      const C v = convert<C>(in[c]);
      squares += v * v;
    }
    const C s = math::rms_norm_rstd(Tiling::all_reduce(squares, SumOf{}, shared) / C(cols), eps);
    if (Tiling::lane() == 0) rstd[row] = s;
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) {
      const C w = weight != nullptr ? convert<C>(weight[c]) : C(1);
      out[c] = convert<T>(math::rms_norm_element(convert<C>(in[c]), s, w));
    }
  }
}

// grad_x[r, :] from grad_y[r, :], x[r, :], rstd[r] and the weight (null: 1).
template <int kThreadsPerRow, class T>
__global__ void rms_norm_backward_kernel(const T* grad_y, const T* x, const Acc<T>* rstd, const T* weight, T* grad_x,
                                         int64_t rows, int64_t cols) {
  using Tiling = RowTiling<kThreadsPerRow>;
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, shared, Tiling::kSharedSlots);
  const C inv_n = C(1) / C(cols);
  for (int64_t row = Tiling::first_row(); row < rows; row += Tiling::row_step()) {
    const T* dy = grad_y + row * cols;
    const T* in = x + row * cols;
    T* dx = grad_x + row * cols;
    const C s = rstd[row];
    C sum_dxhat_xhat = 0;
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) {
      const C w = weight != nullptr ? convert<C>(weight[c]) : C(1);
      sum_dxhat_xhat += convert<C>(dy[c]) * w * (convert<C>(in[c]) * s);
    }
    sum_dxhat_xhat = Tiling::all_reduce(sum_dxhat_xhat, SumOf{}, shared);
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) {
      const C w = weight != nullptr ? convert<C>(weight[c]) : C(1);
      dx[c] = convert<T>(
          math::rms_norm_backward_element(convert<C>(dy[c]) * w, convert<C>(in[c]) * s, s, sum_dxhat_xhat, inv_n));
    }
  }
}

// The weight gradient's first stage (column_slices in row_sums.cuh): the slice's sum of dy * xhat
// goes to partial[slice, c].
template <class T>
__global__ void rms_norm_weight_partials_kernel(const T* grad_y, const T* x, const Acc<T>* rstd, Acc<T>* partial,
                                                int64_t rows, int64_t cols, int64_t slice_rows) {
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, stripe, kRowStripes * kColTile);
  const StripeRows sr = stripe_rows(rows, slice_rows);
  const int64_t c = sr.col;
  C dw = 0;
  if (c < cols) {
    for (int64_t r = sr.first; r < sr.end; r += kRowStripes)
      dw += convert<C>(grad_y[r * cols + c]) * (convert<C>(x[r * cols + c]) * rstd[r]);
  }
  stripe[threadIdx.y * kColTile + threadIdx.x] = dw;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) partial[blockIdx.y * cols + c] = stripe_total(stripe);
}

// The second stage: the slices' partials in slice order.
template <class T>
__global__ void rms_norm_weight_sum_kernel(const Acc<T>* partial, int64_t slices, int64_t cols, T* grad_weight) {
  using C = Acc<T>;
  TG_GRID_STRIDE_LOOP(c, cols) {
    C total = 0;
    for (int64_t s = 0; s < slices; ++s) total += partial[s * cols + c];
    grad_weight[c] = convert<T>(total);
  }
}

// Overwrites y and rstd; x and y contiguous [rows, cols].
void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  TG_ASSERT(x.is_contiguous() && y.is_contiguous() && x.dim() == 2);
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0 || cols == 0) return;
  cuda::DeviceGuard guard(x.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  dispatch_floating_and_half(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Acc<T>;
    const T* in = static_cast<const T*>(x.data_ptr());
    const T* w = data_or_null<T>(weight);
    T* out = static_cast<T*>(y.data_ptr());
    C* s = static_cast<C*>(rstd.data_ptr());
    const C e = static_cast<C>(eps);
    with_row_tiling(cols, [&](auto tiling) {
      using Tiling = decltype(tiling);
      TG_LAUNCH_KERNEL(Tiling::grid(rows), Tiling::block(), 0, stream, rms_norm_kernel<Tiling::kThreads, T>)
      (in, w, e, out, s, rows, cols);
    });
    TG_CUDA_CHECK_LAUNCH("rms_norm");
  });
}

// Overwrites whichever of grad_x and grad_weight is defined.
void rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                       const Tensor& grad_x, const Tensor& grad_weight) {
  TG_ASSERT(grad_y.is_contiguous() && x.is_contiguous() && x.dim() == 2);
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0 || cols == 0) return;
  cuda::DeviceGuard guard(x.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  dispatch_floating_and_half(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Acc<T>;
    const T* dy = static_cast<const T*>(grad_y.data_ptr());
    const T* in = static_cast<const T*>(x.data_ptr());
    const C* s = static_cast<const C*>(rstd.data_ptr());
    if (grad_x.defined()) {
      const T* w = data_or_null<T>(weight);
      T* dx = static_cast<T*>(grad_x.data_ptr());
      with_row_tiling(cols, [&](auto tiling) {
        using Tiling = decltype(tiling);
        TG_LAUNCH_KERNEL(Tiling::grid(rows), Tiling::block(), 0, stream, rms_norm_backward_kernel<Tiling::kThreads, T>)
        (dy, in, s, w, dx, rows, cols);
      });
      TG_CUDA_CHECK_LAUNCH("rms_norm_backward");
    }
    if (!grad_weight.defined()) return;
    const ColumnSlices slices = column_slices(rows, cols);
    // Freed (stream-ordered) when it goes out of scope.
    Tensor scratch = backend::allocate_tensor({slices.count, cols}, rstd.dtype(), x.device(), "rms_norm_backward");
    C* partial = static_cast<C*>(scratch.data_ptr());
    TG_LAUNCH_KERNEL(slices.grid, dim3(kColTile, kRowStripes), 0, stream, rms_norm_weight_partials_kernel<T>)
    (dy, in, s, partial, rows, cols, slices.slice_rows);
    TG_CUDA_CHECK_LAUNCH("rms_norm_backward");
    TG_LAUNCH_KERNEL(grid_for(cols), kBlockThreads, 0, stream, rms_norm_weight_sum_kernel<T>)
    (partial, slices.count, cols, mutable_data_or_null<T>(grad_weight));
    TG_CUDA_CHECK_LAUNCH("rms_norm_backward");
  });
}

}  // namespace

void register_rms_norm(backend::KernelTable& table) {
  table.rms_norm = rms_norm;
  table.rms_norm_backward = rms_norm_backward;
}

}  // namespace tapegrad::cuda_backend
