// Layer normalisation on the CPU, forward and backward, one row per task like softmax.cpp. The
// formulas are math/layer_norm.h, shared with the CUDA kernels. Float runs the row bodies compiled
// per instruction set (TG_VECTOR_CLONES); row sums keep kLanes partial results so the loops
// vectorise in an order fixed by the row length, not by the machine's vector width.
#include "math/layer_norm.h"

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

// Rows [r0, r1): mean and variance in two passes over the row (it stays in cache), which keeps the
// variance exact for rows far from zero, where one-pass sum(x^2) - mean^2 cancels.
template <class T>
TG_ALWAYS_INLINE void layer_norm_rows(const T* x, const T* weight, const T* bias, T eps, T* y, T* mean, T* rstd,
                                      int64_t cols, int64_t r0, int64_t r1) {
  const T* __restrict w = weight;
  const T* __restrict b = bias;
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict row = x + r * cols;
    T* __restrict out = y + r * cols;
    const T shift = row[0];  // see math/layer_norm.h
    const T m = shift + lane_sum<T>(cols, [&](int64_t c) { return row[c] - shift; }) / T(cols);
    auto squared_deviation = [&](int64_t c) { return (row[c] - m) * (row[c] - m); };
    const T var = lane_sum<T>(cols, squared_deviation) / T(cols);
    const T s = math::layer_norm_rstd(var, eps);
    mean[r] = m;
    rstd[r] = s;
    // The four affine cases as separate loops, so none branches per element.
    if (w != nullptr && b != nullptr) {
      for (int64_t c = 0; c < cols; ++c) out[c] = math::layer_norm_element(row[c], m, s, w[c], b[c]);
    } else if (w != nullptr) {
      for (int64_t c = 0; c < cols; ++c) out[c] = math::layer_norm_element(row[c], m, s, w[c], T(0));
    } else if (b != nullptr) {
      for (int64_t c = 0; c < cols; ++c) out[c] = math::layer_norm_element(row[c], m, s, T(1), b[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) out[c] = math::layer_norm_element(row[c], m, s, T(1), T(0));
    }
  }
}

// Rows [r0, r1): overwrites dx (when not null) and adds each row's dy * xhat and dy into dw_part
// and db_part (when not null).
template <class T>
TG_ALWAYS_INLINE void layer_norm_backward_rows(const T* grad_y, const T* x, const T* mean, const T* rstd,
                                               const T* weight, T* grad_x, T* dw_part, T* db_part, int64_t cols,
                                               int64_t r0, int64_t r1) {
  const T inv_n = T(1) / T(cols);
  const T* __restrict w = weight;
  T* __restrict dw = dw_part;
  T* __restrict db = db_part;
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict dy = grad_y + r * cols;
    const T* __restrict row = x + r * cols;
    const T m = mean[r], s = rstd[r];
    auto xhat = [&](int64_t c) { return (row[c] - m) * s; };
    if (grad_x != nullptr) {
      T* __restrict dx = grad_x + r * cols;
      // The same two passes with dxhat = dy * w, or dy without a weight.
      auto write_dx = [&](const auto& dxhat) {
        T sum_dxhat, sum_dxhat_xhat;
        lane_sums<T>(
            cols, dxhat, [&](int64_t c) { return dxhat(c) * xhat(c); }, sum_dxhat, sum_dxhat_xhat);
        for (int64_t c = 0; c < cols; ++c)
          dx[c] = math::layer_norm_backward_element(dxhat(c), xhat(c), s, sum_dxhat, sum_dxhat_xhat, inv_n);
      };
      if (w != nullptr)
        write_dx([&](int64_t c) { return dy[c] * w[c]; });
      else
        write_dx([&](int64_t c) { return dy[c]; });
    }
    if (dw != nullptr)
      for (int64_t c = 0; c < cols; ++c) dw[c] += dy[c] * xhat(c);
    if (db != nullptr)
      for (int64_t c = 0; c < cols; ++c) db[c] += dy[c];
  }
}

// The float instantiations, once per instruction set.
TG_VECTOR_CLONES void layer_norm_rows_f32(const float* x, const float* w, const float* b, float eps, float* y,
                                          float* mean, float* rstd, int64_t cols, int64_t r0, int64_t r1) {
  layer_norm_rows(x, w, b, eps, y, mean, rstd, cols, r0, r1);
}
TG_VECTOR_CLONES void layer_norm_backward_rows_f32(const float* dy, const float* x, const float* mean,
                                                   const float* rstd, const float* w, float* dx, float* dw, float* db,
                                                   int64_t cols, int64_t r0, int64_t r1) {
  layer_norm_backward_rows(dy, x, mean, rstd, w, dx, dw, db, cols, r0, r1);
}

void run_layer_norm_rows(const float* x, const float* w, const float* b, float eps, float* y, float* mean, float* rstd,
                         int64_t cols, int64_t r0, int64_t r1) {
  layer_norm_rows_f32(x, w, b, eps, y, mean, rstd, cols, r0, r1);
}
void run_layer_norm_rows(const double* x, const double* w, const double* b, double eps, double* y, double* mean,
                         double* rstd, int64_t cols, int64_t r0, int64_t r1) {
  layer_norm_rows(x, w, b, eps, y, mean, rstd, cols, r0, r1);
}
void run_layer_norm_backward_rows(const float* dy, const float* x, const float* mean, const float* rstd, const float* w,
                                  float* dx, float* dw, float* db, int64_t cols, int64_t r0, int64_t r1) {
  layer_norm_backward_rows_f32(dy, x, mean, rstd, w, dx, dw, db, cols, r0, r1);
}
void run_layer_norm_backward_rows(const double* dy, const double* x, const double* mean, const double* rstd,
                                  const double* w, double* dx, double* dw, double* db, int64_t cols, int64_t r0,
                                  int64_t r1) {
  layer_norm_backward_rows(dy, x, mean, rstd, w, dx, dw, db, cols, r0, r1);
}

// Overwrites y, mean and rstd; x and y contiguous [rows, cols].
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = x.size(0), cols = x.size(1);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.data_ptr());
    const T* w = data_or_null<T>(weight);
    const T* b = data_or_null<T>(bias);
    T* out = static_cast<T*>(y.data_ptr());
    T* m = static_cast<T*>(mean.data_ptr());
    T* s = static_cast<T*>(rstd.data_ptr());
    const T e = static_cast<T>(eps);
    parallel_for(0, rows, row_grain(cols),
                 [&](int64_t r0, int64_t r1) { run_layer_norm_rows(in, w, b, e, out, m, s, cols, r0, r1); });
  });
}

// Overwrites whichever of grad_x, grad_weight and grad_bias is defined.
void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  const int64_t rows = x.size(0), cols = x.size(1);
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy = static_cast<const T*>(grad_y.data_ptr());
    const T* in = static_cast<const T*>(x.data_ptr());
    const T* m = static_cast<const T*>(mean.data_ptr());
    const T* s = static_cast<const T*>(rstd.data_ptr());
    const T* w = data_or_null<T>(weight);
    T* dx = mutable_data_or_null<T>(grad_x);
    T* dw = mutable_data_or_null<T>(grad_weight);
    T* db = mutable_data_or_null<T>(grad_bias);
    if (dw == nullptr && db == nullptr) {
      parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
        run_layer_norm_backward_rows(dy, in, m, s, w, dx, nullptr, nullptr, cols, r0, r1);
      });
      return;
    }
    // Note [norm parameter gradients] in row_sums.h; per block: a dw part, then a db part.
    row_block_column_sums<T, 2>(
        rows, cols,
        [&](int64_t r0, int64_t r1, T* part) {
          run_layer_norm_backward_rows(dy, in, m, s, w, dx, dw ? part : nullptr, db ? part + cols : nullptr, cols, r0,
                                       r1);
        },
        [&](int64_t c, const double* sums) {
          if (dw != nullptr) dw[c] = static_cast<T>(sums[0]);
          if (db != nullptr) db[c] = static_cast<T>(sums[1]);
        });
  });
}

}  // namespace

void register_layer_norm(backend::KernelTable& t) {
  t.layer_norm = layer_norm;
  t.layer_norm_backward = layer_norm_backward;
}

}  // namespace tapegrad::cpu
