// Softmax and log-softmax of one row, host+device, given the row max m and total = sum exp(x - m):
//   softmax:      y = exp(x - m) / total        backward: g_x = y * (g - sum(g * y))
//   log_softmax:  y = (x - m) - log(total)     backward: g_x = g - exp(y) * sum(g)
// Working relative to the max keeps exp() from overflowing; forming max + log(total) first would
// round it at the magnitude of the logits and lose digits of small log-probabilities.
#pragma once

#include <cmath>

#include "math/host_device.h"

namespace tapegrad::math {

// exp and log in T's own precision on both sides (an unqualified call on the host would pick the
// C library's double version for a float).
template <class T>
TG_HD T exp_of(T x) {
#if defined(__CUDA_ARCH__)
  return exp(x);
#else
  return std::exp(x);
#endif
}

template <class T>
TG_HD T log_of(T x) {
#if defined(__CUDA_ARCH__)
  return log(x);
#else
  return std::log(x);
#endif
}

// `shifted` is x - m; `inv_total` is 1 / total.
template <class T>
TG_HD T softmax_from_shifted(T shifted, T inv_total) {
  return exp_of(shifted) * inv_total;
}

// `log_total` is log(total).
template <class T>
TG_HD T log_softmax_from_shifted(T shifted, T log_total) {
  return shifted - log_total;
}

// `dot` is sum over the row of g * y.
template <class T>
TG_HD T softmax_backward_element(T grad, T y, T dot) {
  return y * (grad - dot);
}

// `grad_sum` is sum over the row of g; `softmax_y` is exp(y), for a caller with its own exp.
template <class T>
TG_HD T log_softmax_backward_from_softmax(T grad, T softmax_y, T grad_sum) {
  return grad - softmax_y * grad_sum;
}

template <class T>
TG_HD T log_softmax_backward_element(T grad, T y, T grad_sum) {
  return log_softmax_backward_from_softmax(grad, exp_of(y), grad_sum);
}

}  // namespace tapegrad::math
