// Softmax and log-softmax over the last dim of a contiguous [rows, cols] tensor, and their
// backward: a warp per row up to kWarpRowLimit cols, a block per row beyond. Each row is read
// three times (max, sum, write); the re-reads of a row mostly hit the cache. 16-bit floats compute
// in float. The formulas are math/softmax.h, shared with the CPU backend.
#include <cstdint>
#include <limits>

#include "kernels/block_reduce.cuh"
#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "kernels/row_sums.cuh"
#include "math/softmax.h"
#include "register.h"
#include "runtime/cuda_check.h"

namespace tapegrad::cuda_backend {

namespace {

// y[r, :] = softmax(x[r, :]) or log_softmax(x[r, :]).
template <int kThreadsPerRow, class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t rows, int64_t cols, bool take_log) {
  using Tiling = RowTiling<kThreadsPerRow>;
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, shared, Tiling::kSharedSlots);
  for (int64_t row = Tiling::first_row(); row < rows; row += Tiling::row_step()) {
    const T* in = x + row * cols;
    T* out = y + row * cols;
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) m = MaxOf{}(m, convert<C>(in[c]));
    m = Tiling::all_reduce(m, MaxOf{}, shared);
    C total = 0;
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) total += math::exp_of(convert<C>(in[c]) - m);
    total = Tiling::all_reduce(total, SumOf{}, shared);
    if (take_log) {
      const C log_total = math::log_of(total);
      for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow)
        out[c] = convert<T>(math::log_softmax_from_shifted(convert<C>(in[c]) - m, log_total));
    } else {
      const C inv_total = C(1) / total;
      for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow)
        out[c] = convert<T>(math::softmax_from_shifted(convert<C>(in[c]) - m, inv_total));
    }
  }
}

// grad_x[r, :] from grad_out[r, :] and the forward output y[r, :].
template <int kThreadsPerRow, class T>
__global__ void softmax_backward_kernel(const T* grad_out, const T* y, T* grad_x, int64_t rows, int64_t cols,
                                        bool take_log) {
  using Tiling = RowTiling<kThreadsPerRow>;
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, shared, Tiling::kSharedSlots);
  for (int64_t row = Tiling::first_row(); row < rows; row += Tiling::row_step()) {
    const T* g = grad_out + row * cols;
    const T* yr = y + row * cols;
    T* gx = grad_x + row * cols;
    // log_softmax needs sum(g), softmax sum(g * y).
    C dot = 0;
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow)
      dot += take_log ? convert<C>(g[c]) : convert<C>(g[c]) * convert<C>(yr[c]);
    dot = Tiling::all_reduce(dot, SumOf{}, shared);
    for (int64_t c = Tiling::lane(); c < cols; c += kThreadsPerRow) {
      const C gc = convert<C>(g[c]), yc = convert<C>(yr[c]);
      gx[c] = convert<T>(take_log ? math::log_softmax_backward_element(gc, yc, dot)
                                  : math::softmax_backward_element(gc, yc, dot));
    }
  }
}

int64_t row_count(const Tensor& t, int64_t cols) {
  return cols == 0 ? 0 : t.numel() / cols;
}

// Overwrites out; x and out contiguous, rows along the last dim.
void softmax(const Tensor& x, const Tensor& out, bool log) {
  TG_ASSERT(x.is_contiguous() && out.is_contiguous() && x.dim() >= 1);
  const char* op = log ? "log_softmax" : "softmax";
  const int64_t cols = x.size(-1), rows = row_count(x, cols);
  if (rows == 0) return;
  cuda::DeviceGuard guard(x.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  dispatch_floating_and_half(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    with_row_tiling(cols, [&](auto tiling) {
      using Tiling = decltype(tiling);
      TG_LAUNCH_KERNEL(Tiling::grid(rows), Tiling::block(), 0, stream, softmax_kernel<Tiling::kThreads, T>)
      (in, y, rows, cols, log);
    });
    TG_CUDA_CHECK_LAUNCH(op);
  });
}

// Overwrites grad_x. softmax: g_x = y * (g - sum(g * y)); log_softmax: g_x = g - exp(y) * sum(g).
void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_x, bool log) {
  TG_ASSERT(grad_out.is_contiguous() && y.is_contiguous() && grad_x.is_contiguous() && y.dim() >= 1);
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  const int64_t cols = y.size(-1), rows = row_count(y, cols);
  if (rows == 0) return;
  cuda::DeviceGuard guard(y.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  dispatch_floating_and_half(y.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(grad_out.data_ptr());
    const T* out = static_cast<const T*>(y.data_ptr());
    T* gx = static_cast<T*>(grad_x.data_ptr());
    with_row_tiling(cols, [&](auto tiling) {
      using Tiling = decltype(tiling);
      TG_LAUNCH_KERNEL(Tiling::grid(rows), Tiling::block(), 0, stream, softmax_backward_kernel<Tiling::kThreads, T>)
      (g, out, gx, rows, cols, log);
    });
    TG_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace

void register_softmax(backend::KernelTable& table) {
  table.softmax = softmax;
  table.softmax_backward = softmax_backward;
}

}  // namespace tapegrad::cuda_backend
