// Softmax, log-softmax and the fused cross-entropy on the CPU, one row per task. The row bodies are
// written once over T; float runs them with vec_math.h's exp, compiled per instruction set
// (TG_VECTOR_CLONES), double with the math library's. Sums and maxima keep kLanes partial results
// so that the loops vectorise without reassociating floating point (the order is fixed, so results
// do not depend on the machine's vector width).
#include "math/softmax.h"

#include <cmath>

#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/parallel.h"
#include "cpu/loops/row_sums.h"
#include "cpu/loops/vec_math.h"
#include "cpu/register.h"
#include "math/cross_entropy.h"

namespace tapegrad::cpu {

namespace {

// max over the row, NaN only when row[0] is NaN (as the plain loop `m = x > m ? x : m`).
template <class T>
TG_ALWAYS_INLINE T row_max(const T* row, int64_t cols) {
  T part[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) part[k] = row[0];
  int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) part[k] = row[c + k] > part[k] ? row[c + k] : part[k];
  for (int64_t k = 0; c + k < cols; ++k) part[k] = row[c + k] > part[k] ? row[c + k] : part[k];
  T m = part[0];
  for (int64_t k = 1; k < kLanes; ++k) m = part[k] > m ? part[k] : m;
  return m;
}

// The formulas are in math/softmax.h and math/cross_entropy.h, shared with the CUDA kernels; only
// exp comes from vec_math.h here. Rows [r0, r1) of contiguous [rows, cols].

template <class T>
TG_ALWAYS_INLINE void softmax_rows(const T* in, T* out, int64_t cols, bool log, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict row = in + r * cols;
    T* __restrict y = out + r * cols;
    const T m = row_max(row, cols);
    for (int64_t c = 0; c < cols; ++c) y[c] = vec::exp(row[c] - m);
    const T total = lane_sum<T>(cols, [&](int64_t c) { return y[c]; });
    if (log) {
      const T log_total = std::log(total);
      for (int64_t c = 0; c < cols; ++c) y[c] = math::log_softmax_from_shifted(row[c] - m, log_total);
    } else {
      const T inv = T(1) / total;
      for (int64_t c = 0; c < cols; ++c) y[c] *= inv;
    }
  }
}

// softmax: g_x = y * (g - sum(g * y)); log_softmax: g_x = g - exp(y) * sum(g).
template <class T>
TG_ALWAYS_INLINE void softmax_backward_rows(const T* grad, const T* out, T* grad_in, int64_t cols, bool log, int64_t r0,
                                            int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict gr = grad + r * cols;
    const T* __restrict yr = out + r * cols;
    T* __restrict xr = grad_in + r * cols;
    if (log) {
      const T grad_sum = lane_sum<T>(cols, [&](int64_t c) { return gr[c]; });
      for (int64_t c = 0; c < cols; ++c)
        xr[c] = math::log_softmax_backward_from_softmax(gr[c], vec::exp(yr[c]), grad_sum);
    } else {
      const T dot = lane_sum<T>(cols, [&](int64_t c) { return gr[c] * yr[c]; });
      for (int64_t c = 0; c < cols; ++c) xr[c] = math::softmax_backward_element(gr[c], yr[c], dot);
    }
  }
}

template <class T>
TG_ALWAYS_INLINE void cross_entropy_rows(const T* z, const int64_t* target, T* loss, T* lse_out, int64_t classes,
                                         int64_t ignore_index, T smoothing, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict row = z + r * classes;
    const T m = row_max(row, classes);
    // Work relative to the row max (see math/softmax.h): shifting every logit by m leaves the loss
    // unchanged and keeps small losses precise when logits are large.
    const T total = lane_sum<T>(classes, [&](int64_t c) { return vec::exp(row[c] - m); });
    const T shifted_sum = lane_sum<T>(classes, [&](int64_t c) { return row[c] - m; });
    const T log_total = std::log(total);
    lse_out[r] = m + log_total;
    loss[r] = target[r] == ignore_index
                  ? T(0)
                  : math::cross_entropy_loss<T>(log_total, row[target[r]] - m, shifted_sum, classes, smoothing);
  }
}

// Ignored rows get zeros. grad_losses[r * g_stride] scales row r (g_stride 0: a broadcast scalar).
template <class T>
TG_ALWAYS_INLINE void cross_entropy_backward_rows(const T* grad_losses, int64_t g_stride, const T* z,
                                                  const int64_t* target, const T* lse, T* grad_z, int64_t classes,
                                                  int64_t ignore_index, T smoothing, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    T* __restrict out = grad_z + r * classes;
    const int64_t t = target[r];
    if (t == ignore_index) {
      for (int64_t c = 0; c < classes; ++c) out[c] = T(0);
      continue;
    }
    const T* __restrict row = z + r * classes;
    const T scale = grad_losses[r * g_stride], shift = lse[r];
    for (int64_t c = 0; c < classes; ++c)
      out[c] =
          scale * math::cross_entropy_grad_from_probability<T>(vec::exp(row[c] - shift), c == t, classes, smoothing);
  }
}

// The float instantiations, once per instruction set.
TG_VECTOR_CLONES void softmax_rows_f32(const float* in, float* out, int64_t cols, bool log, int64_t r0, int64_t r1) {
  softmax_rows(in, out, cols, log, r0, r1);
}
TG_VECTOR_CLONES void softmax_backward_rows_f32(const float* grad, const float* out, float* grad_in, int64_t cols,
                                                bool log, int64_t r0, int64_t r1) {
  softmax_backward_rows(grad, out, grad_in, cols, log, r0, r1);
}
TG_VECTOR_CLONES void cross_entropy_rows_f32(const float* z, const int64_t* target, float* loss, float* lse_out,
                                             int64_t classes, int64_t ignore_index, float smoothing, int64_t r0,
                                             int64_t r1) {
  cross_entropy_rows(z, target, loss, lse_out, classes, ignore_index, smoothing, r0, r1);
}
TG_VECTOR_CLONES void cross_entropy_backward_rows_f32(const float* grad_losses, int64_t g_stride, const float* z,
                                                      const int64_t* target, const float* lse, float* grad_z,
                                                      int64_t classes, int64_t ignore_index, float smoothing,
                                                      int64_t r0, int64_t r1) {
  cross_entropy_backward_rows(grad_losses, g_stride, z, target, lse, grad_z, classes, ignore_index, smoothing, r0, r1);
}

// Overloads so the kernels below are written once: float goes to the clones above.
void run_softmax_rows(const float* in, float* out, int64_t cols, bool log, int64_t r0, int64_t r1) {
  softmax_rows_f32(in, out, cols, log, r0, r1);
}
void run_softmax_rows(const double* in, double* out, int64_t cols, bool log, int64_t r0, int64_t r1) {
  softmax_rows(in, out, cols, log, r0, r1);
}
void run_softmax_backward_rows(const float* g, const float* y, float* gx, int64_t cols, bool log, int64_t r0,
                               int64_t r1) {
  softmax_backward_rows_f32(g, y, gx, cols, log, r0, r1);
}
void run_softmax_backward_rows(const double* g, const double* y, double* gx, int64_t cols, bool log, int64_t r0,
                               int64_t r1) {
  softmax_backward_rows(g, y, gx, cols, log, r0, r1);
}
void run_cross_entropy_rows(const float* z, const int64_t* t, float* loss, float* lse, int64_t classes,
                            int64_t ignore_index, float smoothing, int64_t r0, int64_t r1) {
  cross_entropy_rows_f32(z, t, loss, lse, classes, ignore_index, smoothing, r0, r1);
}
void run_cross_entropy_rows(const double* z, const int64_t* t, double* loss, double* lse, int64_t classes,
                            int64_t ignore_index, double smoothing, int64_t r0, int64_t r1) {
  cross_entropy_rows(z, t, loss, lse, classes, ignore_index, smoothing, r0, r1);
}
void run_cross_entropy_backward_rows(const float* g, int64_t g_stride, const float* z, const int64_t* t,
                                     const float* lse, float* gz, int64_t classes, int64_t ignore_index,
                                     float smoothing, int64_t r0, int64_t r1) {
  cross_entropy_backward_rows_f32(g, g_stride, z, t, lse, gz, classes, ignore_index, smoothing, r0, r1);
}
void run_cross_entropy_backward_rows(const double* g, int64_t g_stride, const double* z, const int64_t* t,
                                     const double* lse, double* gz, int64_t classes, int64_t ignore_index,
                                     double smoothing, int64_t r0, int64_t r1) {
  cross_entropy_backward_rows(g, g_stride, z, t, lse, gz, classes, ignore_index, smoothing, r0, r1);
}

// Overwrites out; x and out are contiguous [rows, cols].
void softmax(const Tensor& x, const Tensor& out, bool log) {
  const int64_t cols = x.size(-1), rows = cols ? x.numel() / cols : 0;
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, rows, row_grain(cols), [&](int64_t b, int64_t e) { run_softmax_rows(in, o, cols, log, b, e); });
  });
}

// Overwrites grad_x. softmax: g_x = y * (g - sum(g * y)); log_softmax: g_x = g - exp(y) * sum(g).
void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_x, bool log) {
  const int64_t cols = y.size(-1), rows = cols ? y.numel() / cols : 0;
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(grad_out.data_ptr());
    const T* out = static_cast<const T*>(y.data_ptr());
    T* gx = static_cast<T*>(grad_x.data_ptr());
    parallel_for(0, rows, row_grain(cols),
                 [&](int64_t b, int64_t e) { run_softmax_backward_rows(g, out, gx, cols, log, b, e); });
  });
}

// Overwrites losses and logsumexp ([N] each), and reduced (and count) when defined.
void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& losses, const Tensor& logsumexp,
                   const Tensor& reduced, const Tensor& count, int64_t ignore_index, double label_smoothing) {
  const int64_t classes = logits.size(1), rows = logits.size(0);
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* z = static_cast<const T*>(logits.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    T* loss = static_cast<T*>(losses.data_ptr());
    T* lse_out = static_cast<T*>(logsumexp.data_ptr());
    const T smoothing = static_cast<T>(label_smoothing);
    parallel_for(0, rows, row_grain(classes), [&](int64_t b, int64_t e) {
      run_cross_entropy_rows(z, t, loss, lse_out, classes, ignore_index, smoothing, b, e);
    });
    if (!reduced.defined()) return;
    T total = lane_sum<T>(rows, [&](int64_t r) { return loss[r]; });
    if (count.defined()) {
      int64_t counted = 0;
      for (int64_t r = 0; r < rows; ++r) counted += t[r] != ignore_index;
      *static_cast<int64_t*>(count.data_ptr()) = counted;
      total /= static_cast<T>(counted);  // 0 / 0 = NaN when every row is ignored, as in PyTorch
    }
    *static_cast<T*>(reduced.data_ptr()) = total;
  });
}

// Overwrites grad_logits; ignored rows get zeros. A mean's count divides grad_losses.
void cross_entropy_backward(const Tensor& grad_losses, const Tensor& count, const Tensor& logits, const Tensor& target,
                            const Tensor& logsumexp, const Tensor& grad_logits, int64_t ignore_index,
                            double label_smoothing) {
  const int64_t classes = logits.size(1), rows = logits.size(0);
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* z = static_cast<const T*>(logits.data_ptr());
    const T* g = static_cast<const T*>(grad_losses.data_ptr());
    const int64_t g_stride = grad_losses.dim() ? grad_losses.stride(0) : 0;  // may be a broadcast scalar
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    const T* lse = static_cast<const T*>(logsumexp.data_ptr());
    T* gz = static_cast<T*>(grad_logits.data_ptr());
    const T smoothing = static_cast<T>(label_smoothing);
    T scaled;  // the mean's grad_losses[0] / count, a broadcast scalar like grad_losses
    if (count.defined()) {
      TG_ASSERT(g_stride == 0 || rows == 1);  // a mean's gradient is one value
      scaled = g[0] / static_cast<T>(*static_cast<const int64_t*>(count.data_ptr()));
      g = &scaled;
    }
    parallel_for(0, rows, row_grain(classes), [&](int64_t b, int64_t e) {
      run_cross_entropy_backward_rows(g, g_stride, z, t, lse, gz, classes, ignore_index, smoothing, b, e);
    });
  });
}

}  // namespace

void register_softmax(backend::KernelTable& t) {
  t.softmax = softmax;
  t.softmax_backward = softmax_backward;
  t.cross_entropy = cross_entropy;
  t.cross_entropy_backward = cross_entropy_backward;
}

}  // namespace tapegrad::cpu
