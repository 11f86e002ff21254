// The per-element optimiser updates, host+device, following PyTorch's single-tensor SGD and
// Adam/AdamW exactly (same order of operations, same bias correction).
#pragma once

#include <cmath>

#include "math/host_device.h"

namespace tapegrad::math {

struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first_step;  // the momentum buffer starts as the first gradient, undamped
};

// Updates p (and the momentum buffer, when momentum != 0) in place.
template <class T>
TG_HD void sgd_update(T& p, T g, T* momentum_buffer, const SgdHyper& h) {
  T d = g;
  if (h.weight_decay != 0) d += static_cast<T>(h.weight_decay) * p;
  if (h.momentum != 0) {
    T& buf = *momentum_buffer;
    buf = h.first_step ? d : static_cast<T>(h.momentum) * buf + static_cast<T>(1 - h.dampening) * d;
    d = h.nesterov ? d + static_cast<T>(h.momentum) * buf : buf;
  }
  p -= static_cast<T>(h.lr) * d;
}

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled_weight_decay;  // AdamW
  bool amsgrad;
  double bias_correction1;      // 1 - beta1^step
  double bias_correction2_sqrt; // sqrt(1 - beta2^step)
};

// Updates p, the moments m and v, and (amsgrad) the running max of v, in place.
template <class T>
TG_HD void adam_update(T& p, T g, T& m, T& v, T* v_max, const AdamHyper& h) {
  if (h.weight_decay != 0) {
    if (h.decoupled_weight_decay) {
      p *= static_cast<T>(1 - h.lr * h.weight_decay);
    } else {
      g += static_cast<T>(h.weight_decay) * p;
    }
  }
  m += (g - m) * static_cast<T>(1 - h.beta1);  // lerp, as PyTorch writes it
  v = static_cast<T>(h.beta2) * v + static_cast<T>(1 - h.beta2) * g * g;
  T second = v;
  if (h.amsgrad) {
    *v_max = *v_max > v ? *v_max : v;
    second = *v_max;
  }
  T denom = sqrt(second) / static_cast<T>(h.bias_correction2_sqrt) + static_cast<T>(h.eps);
  p -= static_cast<T>(h.lr / h.bias_correction1) * m / denom;
}

}  // namespace tapegrad::math
