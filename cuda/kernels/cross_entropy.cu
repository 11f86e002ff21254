// Fused cross-entropy over logits [N, C] (contiguous) and int64 targets [N]: the forward is one
// kernel (a warp or a block per row computes max, logsumexp and the loss with label smoothing),
// the backward one elementwise kernel. A sum or mean is reduced on the device, the kernel counting
// the rows not ignored itself: inside the row kernel when its grid is one block, else in one more
// single-block kernel; the backward divides by that count itself. Rows whose target is
// ignore_index get loss 0 and a zero gradient. A target outside [0, C) is not read through: it is
// reported on the device (Note [deferred checks]) and gives a NaN loss. 16-bit floats compute in
// float. The formulas are math/cross_entropy.h, shared with the CPU backend.
#include <cstdint>
#include <limits>

#include "kernels/block_reduce.cuh"
#include "kernels/device_checks.cuh"
#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "kernels/row_sums.cuh"
#include "math/cross_entropy.h"
#include "math/softmax.h"
#include "register.h"
#include "runtime/cuda_check.h"
#include "runtime/device_checks.h"

namespace tapegrad::cuda_backend {

namespace {

// The sum of a block's losses, and for a mean (count defined) the number of rows not ignored,
// written by one thread: reduced = sum (/ count). A mean over no counted rows is 0 / 0 = NaN, as
// in PyTorch.
template <class T>
__device__ void write_reduced(Acc<T> sum, int64_t counted, T* reduced, int64_t* count) {
  using C = Acc<T>;
  if (count != nullptr) {
    *count = counted;
    sum = sum / static_cast<C>(counted);
  }
  *reduced = convert<T>(sum);
}

// losses[r] and logsumexp[r] for row r. Like the CPU, everything is relative to the row max m:
// lse = m + log(sum exp(z - m)), and the loss takes z_t - m and sum(z - m), which keeps small
// losses precise when the logits are large. With `reduced` (only for a one-block grid) the block
// also writes the reduction (write_reduced); each row's first lane adds up the losses as stored.
template <int kThreadsPerRow, class T>
__global__ void cross_entropy_kernel(const T* logits, const int64_t* target, T* losses, T* logsumexp, int64_t rows,
                                     int64_t classes, int64_t ignore_index, Acc<T> smoothing, CheckSite site,
                                     T* reduced, int64_t* count) {
  using Tiling = RowTiling<kThreadsPerRow>;
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, shared, Tiling::kSharedSlots);
  TG_SHARED_ARRAY(C, row_sums, Tiling::kRowsPerBlock);
  TG_SHARED_ARRAY(int64_t, row_counts, Tiling::kRowsPerBlock);
  C loss_sum = 0;
  int64_t counted = 0;
  for (int64_t row = Tiling::first_row(); row < rows; row += Tiling::row_step()) {
    const T* z = logits + row * classes;
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t c = Tiling::lane(); c < classes; c += kThreadsPerRow) m = MaxOf{}(m, convert<C>(z[c]));
    m = Tiling::all_reduce(m, MaxOf{}, shared);
    C total = 0, shifted_sum = 0;
    for (int64_t c = Tiling::lane(); c < classes; c += kThreadsPerRow) {
      const C shifted = convert<C>(z[c]) - m;
      total += math::exp_of(shifted);
      shifted_sum += shifted;
    }
    total = Tiling::all_reduce(total, SumOf{}, shared);
    shifted_sum = Tiling::all_reduce(shifted_sum, SumOf{}, shared);
    if (Tiling::lane() == 0) {
      const C log_total = math::log_of(total);
      const int64_t t = target[row];
      logsumexp[row] = convert<T>(m + log_total);
      // An ignored row's target may lie outside [0, classes): it is never read. Any other target
      // outside it is reported (Note [deferred checks]) and its row's loss is NaN.
      if (t == ignore_index) {
        losses[row] = convert<T>(C(0));
      } else if (t < 0 || t >= classes) {
        report_bad_value(site, t, row);
        losses[row] = convert<T>(std::numeric_limits<C>::quiet_NaN());
      } else {
        losses[row] =
            convert<T>(math::cross_entropy_loss<C>(log_total, convert<C>(z[t]) - m, shifted_sum, classes, smoothing));
      }
      loss_sum += convert<C>(losses[row]);
      counted += t != ignore_index;
    }
  }
  if (reduced == nullptr) return;  // the same for the whole grid
  if (Tiling::lane() == 0) {
    row_sums[threadIdx.y] = loss_sum;
    row_counts[threadIdx.y] = counted;
  }
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    for (int r = 1; r < Tiling::kRowsPerBlock; ++r) {  // in a fixed order: the same result every run
      loss_sum += row_sums[r];
      counted += row_counts[r];
    }
    write_reduced(loss_sum, counted, reduced, count);
  }
}

// The reduction for a grid of more than one block, in one block: thread i adds rows i, i + 256, ...
template <class T>
__global__ void cross_entropy_reduce_kernel(const T* losses, const int64_t* target, int64_t rows, int64_t ignore_index,
                                            T* reduced, int64_t* count) {
  using C = Acc<T>;
  TG_SHARED_ARRAY(C, sums, kBlockThreads / kWarpSize);
  TG_SHARED_ARRAY(int64_t, counts, kBlockThreads / kWarpSize);
  C loss_sum = 0;
  int64_t counted = 0;
  for (int64_t row = threadIdx.x; row < rows; row += blockDim.x) {
    loss_sum += convert<C>(losses[row]);
    counted += target[row] != ignore_index;
  }
  loss_sum = block_all_reduce(loss_sum, SumOf{}, sums);
  counted = block_all_reduce(counted, SumOf{}, counts);
  if (threadIdx.x == 0) write_reduced(loss_sum, counted, reduced, count);
}

// grad_logits[r, c] = grad_losses[r * grad_stride] (/ *count) * d loss_r / d z[r, c]; grad_stride
// is 0 when the incoming gradient is one value broadcast over the rows, count non-null for a mean.
template <class T>
__global__ void cross_entropy_backward_kernel(const T* grad_losses, int64_t grad_stride, const int64_t* count,
                                              const T* logits, const int64_t* target, const T* logsumexp,
                                              T* grad_logits, int64_t rows, int64_t classes, int64_t ignore_index,
                                              Acc<T> smoothing) {
  using C = Acc<T>;
  TG_GRID_STRIDE_LOOP(e, rows * classes) {
    const int64_t row = e / classes, c = e - row * classes;
    const int64_t t = target[row];
    if (t == ignore_index) {
      grad_logits[e] = convert<T>(C(0));
      continue;
    }
    C scale = convert<C>(grad_losses[row * grad_stride]);
    if (count != nullptr) scale = scale / static_cast<C>(*count);
    grad_logits[e] = convert<T>(scale * math::cross_entropy_grad<C>(convert<C>(logits[e]), convert<C>(logsumexp[row]),
                                                                    c == t, classes, smoothing));
  }
}

// Overwrites losses and logsumexp ([N] each), and reduced (and count) when defined.
void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& losses, const Tensor& logsumexp,
                   const Tensor& reduced, const Tensor& count, int64_t ignore_index, double label_smoothing) {
  TG_ASSERT(logits.dim() == 2 && logits.is_contiguous() && target.is_contiguous() && target.dtype() == kInt64);
  TG_ASSERT(losses.is_contiguous() && logsumexp.is_contiguous());
  const int64_t rows = logits.size(0), classes = logits.size(1);
  if (rows == 0) return;
  TG_CHECK(classes > 0, "cross_entropy: input has no classes");
  cuda::DeviceGuard guard(logits.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  dispatch_floating_and_half(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Acc<T>;
    const T* z = static_cast<const T*>(logits.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    T* loss = static_cast<T*>(losses.data_ptr());
    T* lse = static_cast<T*>(logsumexp.data_ptr());
    const C smoothing = static_cast<C>(label_smoothing);
    CheckSite site;
    site.record = error_record(logits.device().index(), stream);
    site.check = static_cast<int32_t>(backend::DeviceCheck::CrossEntropyTarget);
    site.limit = classes;
    site.ignore_index = ignore_index;
    T* sum_out = reduced.defined() ? static_cast<T*>(reduced.data_ptr()) : nullptr;
    int64_t* count_out = count.defined() ? static_cast<int64_t*>(count.data_ptr()) : nullptr;
    // The row kernel reduces too when its grid is one block; otherwise a second kernel does.
    bool reduced_in_rows = false;
    with_row_tiling(classes, [&](auto tiling) {
      using Tiling = decltype(tiling);
      const int grid = Tiling::grid(rows);
      reduced_in_rows = sum_out != nullptr && grid == 1;
      TG_LAUNCH_KERNEL(grid, Tiling::block(), 0, stream, cross_entropy_kernel<Tiling::kThreads, T>)
      (z, t, loss, lse, rows, classes, ignore_index, smoothing, site, reduced_in_rows ? sum_out : nullptr,
       reduced_in_rows ? count_out : nullptr);
    });
    TG_CUDA_CHECK_LAUNCH("cross_entropy");
    if (sum_out != nullptr && !reduced_in_rows) {
      TG_LAUNCH_KERNEL(1, kBlockThreads, 0, stream, cross_entropy_reduce_kernel<T>)
      (loss, t, rows, ignore_index, sum_out, count_out);
      TG_CUDA_CHECK_LAUNCH("cross_entropy (reduction)");
    }
  });
}

// Overwrites grad_logits; ignored rows get zeros. grad_losses is [N], possibly a broadcast scalar;
// count (int64 0-d, may be undefined) divides it.
void cross_entropy_backward(const Tensor& grad_losses, const Tensor& count, const Tensor& logits, const Tensor& target,
                            const Tensor& logsumexp, const Tensor& grad_logits, int64_t ignore_index,
                            double label_smoothing) {
  TG_ASSERT(logits.dim() == 2 && logits.is_contiguous() && grad_logits.is_contiguous());
  TG_ASSERT(target.is_contiguous() && target.dtype() == kInt64 && logsumexp.is_contiguous());
  TG_ASSERT(grad_losses.dtype() == logits.dtype());
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const int64_t n = rows * classes;
  if (n == 0) return;
  const int64_t grad_stride = grad_losses.dim() ? grad_losses.stride(0) : 0;
  cuda::DeviceGuard guard(logits.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();
  dispatch_floating_and_half(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Acc<T>;
    TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, stream, cross_entropy_backward_kernel<T>)
    (static_cast<const T*>(grad_losses.data_ptr()), grad_stride,
     count.defined() ? static_cast<const int64_t*>(count.data_ptr()) : nullptr,
     static_cast<const T*>(logits.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
     static_cast<const T*>(logsumexp.data_ptr()), static_cast<T*>(grad_logits.data_ptr()), rows, classes, ignore_index,
     static_cast<C>(label_smoothing));
    TG_CUDA_CHECK_LAUNCH("cross_entropy_backward");
  });
}

}  // namespace

void register_cross_entropy(backend::KernelTable& table) {
  table.cross_entropy = cross_entropy;
  table.cross_entropy_backward = cross_entropy_backward;
}

}  // namespace tapegrad::cuda_backend
