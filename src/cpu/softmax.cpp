// Softmax, log-softmax and the fused cross-entropy on the CPU, one row per task.
#include <cmath>

#include "cpu/cpu_kernels.h"
#include "cpu/dtype_dispatch.h"
#include "cpu/parallel.h"
#include "math/cross_entropy.h"
#include "math/softmax.h"

namespace tapegrad::cpu {

namespace {
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)); }

template <class T>
T row_max(const T* row, int64_t cols) {
  T m = row[0];
  for (int64_t c = 1; c < cols; ++c) m = row[c] > m ? row[c] : m;
  return m;
}
}  // namespace

// Overwrites out; x and out are contiguous [rows, cols].
void softmax(const Tensor& x, const Tensor& out, bool log) {
  const int64_t cols = x.size(-1), rows = cols ? x.numel() / cols : 0;
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, rows, row_grain(cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = in + r * cols;
        T* y = o + r * cols;
        T m = row_max(row, cols);
        T total = 0;
        for (int64_t c = 0; c < cols; ++c) {
          y[c] = math::exp_of(row[c] - m);
          total += y[c];
        }
        // The formulas are in math/softmax.h, shared with the CUDA kernels.
        if (log) {
          T log_total = math::log_of(total);
          for (int64_t c = 0; c < cols; ++c) y[c] = math::log_softmax_from_shifted(row[c] - m, log_total);
        } else {
          T inv = T(1) / total;
          for (int64_t c = 0; c < cols; ++c) y[c] *= inv;
        }
      }
    });
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
    parallel_for(0, rows, row_grain(cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* gr = g + r * cols;
        const T* yr = out + r * cols;
        T* xr = gx + r * cols;
        T dot = 0;
        if (log) {
          for (int64_t c = 0; c < cols; ++c) dot += gr[c];
          for (int64_t c = 0; c < cols; ++c) xr[c] = math::log_softmax_backward_element(gr[c], yr[c], dot);
        } else {
          for (int64_t c = 0; c < cols; ++c) dot += gr[c] * yr[c];
          for (int64_t c = 0; c < cols; ++c) xr[c] = math::softmax_backward_element(gr[c], yr[c], dot);
        }
      }
    });
  });
}

// Overwrites losses and logsumexp ([N] each).
void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& losses, const Tensor& logsumexp,
                   int64_t ignore_index, double label_smoothing) {
  const int64_t classes = logits.size(1), rows = logits.size(0);
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* z = static_cast<const T*>(logits.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    T* loss = static_cast<T*>(losses.data_ptr());
    T* lse_out = static_cast<T*>(logsumexp.data_ptr());
    parallel_for(0, rows, row_grain(classes), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = z + r * classes;
        T m = row_max(row, classes);
        // Work relative to the row max (see softmax above): shifting every logit by m leaves the
        // loss unchanged and keeps small losses precise when logits are large.
        T total = 0, shifted_sum = 0;
        for (int64_t c = 0; c < classes; ++c) {
          total += std::exp(row[c] - m);
          shifted_sum += row[c] - m;
        }
        T log_total = std::log(total);
        lse_out[r] = m + log_total;
        loss[r] = t[r] == ignore_index ? T(0)
                                       : math::cross_entropy_loss<T>(log_total, row[t[r]] - m, shifted_sum, classes,
                                                                     static_cast<T>(label_smoothing));
      }
    });
  });
}

// Overwrites grad_logits; ignored rows get zeros.
void cross_entropy_backward(const Tensor& grad_losses, const Tensor& logits, const Tensor& target,
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
    parallel_for(0, rows, row_grain(classes), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T* out = gz + r * classes;
        if (t[r] == ignore_index) {
          for (int64_t c = 0; c < classes; ++c) out[c] = T(0);
          continue;
        }
        const T* row = z + r * classes;
        T scale = g[r * g_stride];
        for (int64_t c = 0; c < classes; ++c)
          out[c] = scale * math::cross_entropy_grad<T>(row[c], lse[r], c == t[r], classes,
                                                       static_cast<T>(label_smoothing));
      }
    });
  });
}

}  // namespace tapegrad::cpu
