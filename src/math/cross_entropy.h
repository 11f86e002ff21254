// Per-row cross-entropy with label smoothing, host+device. For a row of C logits z, target t and
// smoothing e: loss = lse(z) - (1 - e) * z_t - (e / C) * sum_c z_c, and
// d loss / d z_c = softmax(z)_c - (1 - e) * [c == t] - e / C.
#pragma once

#include <cstdint>

#include "math/host_device.h"

namespace tapegrad::math {

template <class T>
TG_HD T cross_entropy_loss(T logsumexp, T target_logit, T logit_sum, int64_t classes, T smoothing) {
  return logsumexp - (T(1) - smoothing) * target_logit - smoothing / T(classes) * logit_sum;
}

// `p` is softmax(z)_c = exp(z_c - logsumexp), for a caller with its own exp (the CPU's vectorised one).
template <class T>
TG_HD T cross_entropy_grad_from_probability(T p, bool is_target, int64_t classes, T smoothing) {
  return p - (is_target ? (T(1) - smoothing) : T(0)) - smoothing / T(classes);
}

template <class T>
TG_HD T cross_entropy_grad(T logit, T logsumexp, bool is_target, int64_t classes, T smoothing) {
  return cross_entropy_grad_from_probability(T(exp(logit - logsumexp)), is_target, classes, smoothing);
}

}  // namespace tapegrad::math
