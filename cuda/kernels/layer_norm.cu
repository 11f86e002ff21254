// Layer normalisation over the rows of a contiguous [rows, cols] tensor, forward and backward: a
// warp per row up to kWarpRowLimit cols, a block per row beyond, as softmax.cu. The weight and
// bias gradients are column sums over all rows: threads along the columns (coalesced), rows split
// over blockIdx.y into slices whose partials a second kernel adds in a fixed order (no atomics, so
// results repeat run to run). 16-bit floats compute in float; mean and rstd are stored in the
// compute type. The formulas are math/layer_norm.h, shared with the CPU backend.
#include <cstdint>

#include "backend/kernel_tensors.h"
#include "kernels/block_reduce.cuh"
#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "kernels/row_sums.cuh"
#include "math/layer_norm.h"
#include "register.h"
#include "runtime/cuda_check.h"

namespace tapegrad::cuda_backend {

using backend::data_or_null;
using backend::mutable_data_or_null;

namespace {

// y[r, :] from x[r, :]; writes mean[r] and rstd[r]. weight and bias may be null (1 and 0).
template <int kThreadsPerRow, class T>
__global__ void layer_norm_kernel(const T* x, const T* weight, const T* bias, Acc<T> eps, T* y, Acc<T>* mean,
                                  Acc<T>* rstd, int64_t rows, int64_t cols) {
  using Tiling = RowTiling<kThreadsPerRow>;
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, shared, Tiling::kSharedSlots);
  for (int64_t row = Tiling::first_row(); row < rows; row += Tiling::row_step()) {
    const T* in = x + row * cols;
    T* out = y + row * cols;
    // Two passes, as on the CPU: the second re-reads the row from cache. The mean is shifted by
    // the row's first value (math/layer_norm.h).
    const C shift = convert<C>(in[0]);
    C total = 0;
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) total += convert<C>(in[c]) - shift;
    const C m = shift + Tiling::all_reduce(total, SumOf{}, shared) / C(cols);
    C squares = 0;
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) {
      const C d = convert<C>(in[c]) - m;
      squares += d * d;
    }
    const C var = Tiling::all_reduce(squares, SumOf{}, shared) / C(cols);
    const C s = math::layer_norm_rstd(var, eps);
    if (Tiling::lane() == 0) {
      mean[row] = m;
      rstd[row] = s;
    }
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) {
      const C w = weight != nullptr ? convert<C>(weight[c]) : C(1);
      const C b = bias != nullptr ? convert<C>(bias[c]) : C(0);
      out[c] = convert<T>(math::layer_norm_element(convert<C>(in[c]), m, s, w, b));
    }
  }
}

// grad_x[r, :] from grad_y[r, :], x[r, :], mean[r], rstd[r] and the weight (null: 1).
template <int kThreadsPerRow, class T>
__global__ void layer_norm_backward_kernel(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                                           const T* weight, T* grad_x, int64_t rows, int64_t cols) {
  using Tiling = RowTiling<kThreadsPerRow>;
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, shared, Tiling::kSharedSlots);
  const C inv_n = C(1) / C(cols);
  for (int64_t row = Tiling::first_row(); row < rows; row += Tiling::row_step()) {
    const T* dy = grad_y + row * cols;
    const T* in = x + row * cols;
    T* dx = grad_x + row * cols;
    const C m = mean[row], s = rstd[row];
    C sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) {
      const C w = weight != nullptr ? convert<C>(weight[c]) : C(1);
      const C dxhat = convert<C>(dy[c]) * w;
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * ((convert<C>(in[c]) - m) * s);
    }
    sum_dxhat = Tiling::all_reduce(sum_dxhat, SumOf{}, shared);
    sum_dxhat_xhat = Tiling::all_reduce(sum_dxhat_xhat, SumOf{}, shared);
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) {
      const C w = weight != nullptr ? convert<C>(weight[c]) : C(1);
      const C xhat = (convert<C>(in[c]) - m) * s;
      dx[c] = convert<T>(
          math::layer_norm_backward_element(convert<C>(dy[c]) * w, xhat, s, sum_dxhat, sum_dxhat_xhat, inv_n));
    }
  }
}

// The parameter gradients' first stage (column_slices in row_sums.cuh): the slice's sums go to
// partial[slice, 0, c] (dy * xhat) and partial[slice, 1, c] (dy).
template <class T>
__global__ void layer_norm_param_partials_kernel(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                                                 Acc<T>* partial, int64_t rows, int64_t cols, int64_t slice_rows) {
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, stripe_w, kRowStripes * kColTile);
  TG_SHARED_ARRAY(C, stripe_b, kRowStripes * kColTile);
  const StripeRows sr = stripe_rows(rows, slice_rows);
  const int64_t c = sr.col;
  C dw = 0, db = 0;
  if (c < cols) {
    for (int64_t r = sr.first; r < sr.end; r += kRowStripes) {
      const C dy = convert<C>(grad_y[r * cols + c]);
      dw += dy * ((convert<C>(x[r * cols + c]) - mean[r]) * rstd[r]);
      db += dy;
    }
  }
  stripe_w[threadIdx.y * kColTile + threadIdx.x] = dw;
  stripe_b[threadIdx.y * kColTile + threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    partial[blockIdx.y * 2 * cols + c] = stripe_total(stripe_w);
    partial[blockIdx.y * 2 * cols + cols + c] = stripe_total(stripe_b);
  }
}

// The second stage: the slices' partials in slice order; either output may be null.
template <class T>
__global__ void layer_norm_param_sum_kernel(const Acc<T>* partial, int64_t slices, int64_t cols, T* grad_weight,
                                            T* grad_bias) {
  using C = Acc<T>;
  TG_GRID_STRIDE_LOOP(c, cols) {
    C total_w = 0, total_b = 0;
    for (int64_t s = 0; s < slices; ++s) {
      total_w += partial[s * 2 * cols + c];
      total_b += partial[s * 2 * cols + cols + c];
    }
    if (grad_weight != nullptr) grad_weight[c] = convert<T>(total_w);
    if (grad_bias != nullptr) grad_bias[c] = convert<T>(total_b);
  }
}

// Overwrites y, mean and rstd; x and y contiguous [rows, cols].
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& mean, const Tensor& rstd) {
  TG_ASSERT(x.is_contiguous() && y.is_contiguous() && x.dim() == 2);
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0 || cols == 0) return;
  cuda::DeviceGuard guard(x.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  dispatch_floating_and_half(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Acc<T>;
    const T* in = static_cast<const T*>(x.data_ptr());
    const T* w = data_or_null<T>(weight);
    const T* b = data_or_null<T>(bias);
    T* out = static_cast<T*>(y.data_ptr());
    C* m = static_cast<C*>(mean.data_ptr());
    C* s = static_cast<C*>(rstd.data_ptr());
    const C e = static_cast<C>(eps);
    with_row_tiling(cols, [&](auto tiling) {
      using Tiling = decltype(tiling);
      TG_LAUNCH_KERNEL(Tiling::grid(rows), Tiling::block(), 0, stream, layer_norm_kernel<Tiling::kThreads, T>)
      (in, w, b, e, out, m, s, rows, cols);
    });
    TG_CUDA_CHECK_LAUNCH("layer_norm");
  });
}

// Overwrites whichever of grad_x, grad_weight and grad_bias is defined.
void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  TG_ASSERT(grad_y.is_contiguous() && x.is_contiguous() && x.dim() == 2);
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0 || cols == 0) return;
  cuda::DeviceGuard guard(x.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  dispatch_floating_and_half(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Acc<T>;
    const T* dy = static_cast<const T*>(grad_y.data_ptr());
    const T* in = static_cast<const T*>(x.data_ptr());
    const C* m = static_cast<const C*>(mean.data_ptr());
    const C* s = static_cast<const C*>(rstd.data_ptr());
    if (grad_x.defined()) {
      const T* w = data_or_null<T>(weight);
      T* dx = static_cast<T*>(grad_x.data_ptr());
      with_row_tiling(cols, [&](auto tiling) {
        using Tiling = decltype(tiling);
        TG_LAUNCH_KERNEL(Tiling::grid(rows), Tiling::block(), 0, stream,
                         layer_norm_backward_kernel<Tiling::kThreads, T>)
        (dy, in, m, s, w, dx, rows, cols);
      });
      TG_CUDA_CHECK_LAUNCH("layer_norm_backward");
    }
    if (!grad_weight.defined() && !grad_bias.defined()) return;
    const ColumnSlices slices = column_slices(rows, cols);
    // Freed (stream-ordered) when it goes out of scope.
    Tensor scratch = backend::allocate_tensor({slices.count, 2, cols}, mean.dtype(), x.device(), "layer_norm_backward");
    C* partial = static_cast<C*>(scratch.data_ptr());
    TG_LAUNCH_KERNEL(slices.grid, dim3(kColTile, kRowStripes), 0, stream, layer_norm_param_partials_kernel<T>)
    (dy, in, m, s, partial, rows, cols, slices.slice_rows);
    TG_CUDA_CHECK_LAUNCH("layer_norm_backward");
    TG_LAUNCH_KERNEL(grid_for(cols), kBlockThreads, 0, stream, layer_norm_param_sum_kernel<T>)
    (partial, slices.count, cols, mutable_data_or_null<T>(grad_weight), mutable_data_or_null<T>(grad_bias));
    TG_CUDA_CHECK_LAUNCH("layer_norm_backward");
  });
}

}  // namespace

void register_layer_norm(backend::KernelTable& table) {
  table.layer_norm = layer_norm;
  table.layer_norm_backward = layer_norm_backward;
}

}  // namespace tapegrad::cuda_backend
