// RMS normalisation on the CPU, forward and backward, one row per task like layer_norm.cpp. The
// formulas are math/rms_norm.h, shared with the CUDA kernels. Float runs the row bodies compiled
// per instruction set (TG_VECTOR_CLONES); row sums keep kLanes partial results so the loops
// vectorise in an order fixed by the row length, not by the machine's vector width.
#include "math/rms_norm.h"

#include "backend/kernel_tensors.h"
#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/parallel.h"
#include "cpu/loops/row_sums.h"
#include "cpu/loops/vec_math.h"
#include "cpu/register.h"

namespace tapegrad::cpu {

using backend::data_or_null;
using backend::mutable_data_or_null;

namespace {

// Rows [r0, r1): the mean square in one pass, then the scaled row.
template <class T>
TG_ALWAYS_INLINE void rms_norm_rows(const T* x, const T* weight, T eps, T* y, T* rstd, int64_t cols, int64_t r0,
                                    int64_t r1) {
  const T* __restrict w = weight;
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict row = x + r * cols;
    T* __restrict out = y + r * cols;
    const T mean_square = lane_sum<T>(cols, [&](int64_t c) { return row[c] * row[c]; }) / T(cols);
    const T s = math::rms_norm_rstd(mean_square, eps);
    rstd[r] = s;
    // With and without a weight as separate loops, so neither branches per element.
    if (w != nullptr) {
      for (int64_t c = 0; c < cols; ++c) out[c] = math::rms_norm_element(row[c], s, w[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) out[c] = math::rms_norm_element(row[c], s, T(1));
    }
  }
}

// Rows [r0, r1): overwrites dx (when not null) and adds each row's dy * xhat into dw_part (when
// not null).
template <class T>
TG_ALWAYS_INLINE void rms_norm_backward_rows(const T* grad_y, const T* x, const T* rstd, const T* weight, T* grad_x,
                                             T* dw_part, int64_t cols, int64_t r0, int64_t r1) {
  const T inv_n = T(1) / T(cols);
  const T* __restrict w = weight;
  T* __restrict dw = dw_part;
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict dy = grad_y + r * cols;
    const T* __restrict row = x + r * cols;
    const T s = rstd[r];
    auto xhat = [&](int64_t c) { return row[c] * s; };
    if (grad_x != nullptr) {
      T* __restrict dx = grad_x + r * cols;
      // dxhat = dy * w, or dy without a weight.
      auto write_dx = [&](const auto& dxhat) {
        const T sum_dxhat_xhat = lane_sum<T>(cols, [&](int64_t c) { return dxhat(c) * xhat(c); });
        for (int64_t c = 0; c < cols; ++c)
          dx[c] = math::rms_norm_backward_element(dxhat(c), xhat(c), s, sum_dxhat_xhat, inv_n);
      };
      if (w != nullptr)
        write_dx([&](int64_t c) { return dy[c] * w[c]; });
      else
        write_dx([&](int64_t c) { return dy[c]; });
    }
    if (dw != nullptr)
      for (int64_t c = 0; c < cols; ++c) dw[c] += dy[c] * xhat(c);
  }
}

// The float instantiations, once per instruction set.
TG_VECTOR_CLONES void rms_norm_rows_f32(const float* x, const float* w, float eps, float* y, float* rstd, int64_t cols,
                                        int64_t r0, int64_t r1) {
  rms_norm_rows(x, w, eps, y, rstd, cols, r0, r1);
}
TG_VECTOR_CLONES void rms_norm_backward_rows_f32(const float* dy, const float* x, const float* rstd, const float* w,
                                                 float* dx, float* dw, int64_t cols, int64_t r0, int64_t r1) {
  rms_norm_backward_rows(dy, x, rstd, w, dx, dw, cols, r0, r1);
}

void run_rms_norm_rows(const float* x, const float* w, float eps, float* y, float* rstd, int64_t cols, int64_t r0,
                       int64_t r1) {
  rms_norm_rows_f32(x, w, eps, y, rstd, cols, r0, r1);
}
void run_rms_norm_rows(const double* x, const double* w, double eps, double* y, double* rstd, int64_t cols, int64_t r0,
                       int64_t r1) {
  rms_norm_rows(x, w, eps, y, rstd, cols, r0, r1);
}
void run_rms_norm_backward_rows(const float* dy, const float* x, const float* rstd, const float* w, float* dx,
                                float* dw, int64_t cols, int64_t r0, int64_t r1) {
  rms_norm_backward_rows_f32(dy, x, rstd, w, dx, dw, cols, r0, r1);
}
void run_rms_norm_backward_rows(const double* dy, const double* x, const double* rstd, const double* w, double* dx,
                                double* dw, int64_t cols, int64_t r0, int64_t r1) {
  rms_norm_backward_rows(dy, x, rstd, w, dx, dw, cols, r0, r1);
}

// Overwrites y and rstd; x and y contiguous [rows, cols].
void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  const int64_t rows = x.size(0), cols = x.size(1);
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.data_ptr());
    const T* w = data_or_null<T>(weight);
    T* out = static_cast<T*>(y.data_ptr());
    T* s = static_cast<T*>(rstd.data_ptr());
    const T e = static_cast<T>(eps);
    parallel_for(0, rows, row_grain(cols),
                 [&](int64_t r0, int64_t r1) { run_rms_norm_rows(in, w, e, out, s, cols, r0, r1); });
  });
}

// Overwrites whichever of grad_x and grad_weight is defined.
void rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                       const Tensor& grad_x, const Tensor& grad_weight) {
  const int64_t rows = x.size(0), cols = x.size(1);
  dispatch_floating(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy = static_cast<const T*>(grad_y.data_ptr());
    const T* in = static_cast<const T*>(x.data_ptr());
    const T* s = static_cast<const T*>(rstd.data_ptr());
    const T* w = data_or_null<T>(weight);
    T* dx = mutable_data_or_null<T>(grad_x);
    T* dw = mutable_data_or_null<T>(grad_weight);
    if (dw == nullptr) {
      parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
        run_rms_norm_backward_rows(dy, in, s, w, dx, nullptr, cols, r0, r1);
      });
      return;
    }
    // Note [norm parameter gradients] in row_sums.h.
    row_block_column_sums<T, 1>(
        rows, cols,
        [&](int64_t r0, int64_t r1, T* part) { run_rms_norm_backward_rows(dy, in, s, w, dx, part, cols, r0, r1); },
        [&](int64_t c, const double* sums) { dw[c] = static_cast<T>(sums[0]); });
  });
}

}  // namespace

void register_rms_norm(backend::KernelTable& t) {
  t.rms_norm = rms_norm;
  t.rms_norm_backward = rms_norm_backward;
}

}  // namespace tapegrad::cpu
