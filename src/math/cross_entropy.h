// Per-row cross-entropy with label smoothing, host+device. For a row of C logits z, target t and
// smoothing e: loss = lse(z) - (1 - e) * z_t - (e / C) * sum_c z_c, and
// d loss / d z_c = softmax(z)_c - (1 - e) * [c == t] - e / C.
#pragma once

#include <cstdint>

#include "math/host_device.h"

namespace tapegrad::math {

// Note [masked logits]: a -inf logit (a masked class) makes logit_sum -inf. Without smoothing the
// smoothing term is absent, not 0 * -inf = NaN: PyTorch only computes it when label_smoothing > 0,
// so its loss stays finite. With smoothing the loss is +inf, as PyTorch's
// (1 - e) * nll + e / C * sum_c(-log_softmax(z)_c) gives. The gradient is finite either way (a
// masked class has probability 0).
template <class T>
TG_HD T cross_entropy_loss(T logsumexp, T target_logit, T logit_sum, int64_t classes, T smoothing) {
  const T smooth = smoothing == T(0) ? T(0) : smoothing / T(classes) * logit_sum;
  return logsumexp - (T(1) - smoothing) * target_logit - smooth;
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
