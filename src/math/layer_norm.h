// Layer normalisation of one row of N values, host+device (PyTorch's native_layer_norm):
//   mean = sum(x) / N,  var = sum((x - mean)^2) / N (biased),  rstd = 1 / sqrt(var + eps)
//   y = (x - mean) * rstd * w + b                          (w = 1, b = 0 without affine parameters)
// Backward, with xhat = (x - mean) * rstd and dxhat = dy * w:
//   dx = rstd * (dxhat - (sum(dxhat) + xhat * sum(dxhat * xhat)) / N)
//   dw = sum over rows of dy * xhat,  db = sum over rows of dy
// The CPU loops and the CUDA kernels call these; only how the row sums are formed differs. Both
// form the mean as x0 + sum(x - x0) / N (x0 the row's first value): for rows far from zero
// (1e4 + noise) the shifted values are small and exact, and their float sum loses nothing to the
// offset. The variance is then a second pass over (x - mean)^2, never E[x^2] - mean^2.
#pragma once

#include <cmath>

#include "math/host_device.h"

namespace tapegrad::math {

// 1 / sqrt(var + eps) in T's own precision, as 1 / sqrt (not CUDA's approximate rsqrt) so both
// backends round alike. `var` from a one-pass formula can be a hair below zero; it is clamped.
template <class T>
TG_HD T layer_norm_rstd(T var, T eps) {
  const T v = var > T(0) ? var : T(0);
#if defined(__CUDA_ARCH__)
  return T(1) / sqrt(v + eps);
#else
  return T(1) / std::sqrt(v + eps);
#endif
}

template <class T>
TG_HD T layer_norm_element(T x, T mean, T rstd, T w, T b) {
  return (x - mean) * rstd * w + b;
}

// `sum_dxhat` and `sum_dxhat_xhat` are the row sums above, `inv_n` is 1 / N.
template <class T>
TG_HD T layer_norm_backward_element(T dxhat, T xhat, T rstd, T sum_dxhat, T sum_dxhat_xhat, T inv_n) {
  return rstd * (dxhat - (sum_dxhat + xhat * sum_dxhat_xhat) * inv_n);
}

}  // namespace tapegrad::math
