// RMS normalisation of one row of N values, host+device (PyTorch's rms_norm):
//   rstd = 1 / sqrt(sum(x^2) / N + eps),  y = x * rstd * w          (w = 1 without a weight)
// Backward, with xhat = x * rstd and dxhat = dy * w (layer_norm's without the mean's term):
//   dx = rstd * (dxhat - xhat * sum(dxhat * xhat) / N)
//   dw = sum over rows of dy * xhat
// The CPU loops and the CUDA kernels call these; only how the row sums are formed differs.
#pragma once

#include <cmath>

#include "math/host_device.h"

namespace tapegrad::math {

// 1 / sqrt(mean_square + eps) in T's own precision, as 1 / sqrt (not CUDA's approximate rsqrt) so
// both backends round alike. eps may be 0: a row of zeros then gives rstd = inf and y = NaN, as in
// PyTorch.
template <class T>
TG_HD T rms_norm_rstd(T mean_square, T eps) {
#if defined(__CUDA_ARCH__)
  return T(1) / sqrt(mean_square + eps);
#else
  return T(1) / std::sqrt(mean_square + eps);
#endif
}

// PyTorch's order: (x * rstd) * w.
template <class T>
TG_HD T rms_norm_element(T x, T rstd, T w) {
  return x * rstd * w;
}

// `sum_dxhat_xhat` is the row sum above, `inv_n` is 1 / N.
template <class T>
TG_HD T rms_norm_backward_element(T dxhat, T xhat, T rstd, T sum_dxhat_xhat, T inv_n) {
  return rstd * (dxhat - xhat * sum_dxhat_xhat * inv_n);
}

}  // namespace tapegrad::math
