// The per-element optimiser updates, host+device, following PyTorch's single-tensor SGD and
// Adam/AdamW exactly (same order of operations, same bias correction).
//
// Each rule comes in two forms that compute the same bits:
//  - sgd_update / adam_update with the double hyperparameters, for callers that update one element
//    at a time (the CUDA kernels);
//  - the same names templated on the options (weight decay mode, momentum, nesterov, amsgrad) with
//    the hyperparameters already converted to T, for loops that want no per-element branch and no
//    per-element conversion (the CPU's vectorised passes).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "math/host_device.h"

namespace tapegrad::math {

// sqrt in T's own precision on both sides (an unqualified call on the host would pick the C
// library's double version for a float).
template <class T>
TG_HD T optim_sqrt(T x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first_step;  // the momentum buffer starts as the first gradient, undamped
};

enum class SgdMomentum {
  None,     // plain SGD, no buffer
  First,    // the buffer's first step: it becomes the (decayed) gradient
  Running,  // buffer = momentum * buffer + (1 - dampening) * gradient
};

TG_HD SgdMomentum sgd_momentum_mode(const SgdHyper& h) {
  if (h.momentum == 0) return SgdMomentum::None;
  return h.first_step ? SgdMomentum::First : SgdMomentum::Running;
}

// SgdHyper's values converted to T once.
template <class T>
struct SgdConstants {
  T lr, momentum, one_minus_dampening, weight_decay;
};

template <class T>
TG_HD SgdConstants<T> sgd_constants(const SgdHyper& h) {
  return {static_cast<T>(h.lr), static_cast<T>(h.momentum), static_cast<T>(1 - h.dampening),
          static_cast<T>(h.weight_decay)};
}

// Updates p (and the momentum buffer, unless kMomentum is None) in place. kDecay: weight_decay != 0.
template <class T, bool kDecay, SgdMomentum kMomentum, bool kNesterov>
TG_HD void sgd_update(T& p, T g, T* momentum_buffer, const SgdConstants<T>& c) {
  T d = g;
  if constexpr (kDecay) d += c.weight_decay * p;
  if constexpr (kMomentum != SgdMomentum::None) {
    T& buf = *momentum_buffer;
    if constexpr (kMomentum == SgdMomentum::First) {
      buf = d;
    } else {
      buf = c.momentum * buf + c.one_minus_dampening * d;
    }
    if constexpr (kNesterov) {
      d = d + c.momentum * buf;
    } else {
      d = buf;
    }
  }
  p -= c.lr * d;
}

// Updates p (and the momentum buffer, when momentum != 0) in place.
template <class T>
TG_HD void sgd_update(T& p, T g, T* momentum_buffer, const SgdHyper& h) {
  const SgdConstants<T> c = sgd_constants<T>(h);
  const bool decay = h.weight_decay != 0;
  switch (sgd_momentum_mode(h)) {
    case SgdMomentum::None:
      if (decay)
        sgd_update<T, true, SgdMomentum::None, false>(p, g, momentum_buffer, c);
      else
        sgd_update<T, false, SgdMomentum::None, false>(p, g, momentum_buffer, c);
      return;
    case SgdMomentum::First:
      if (h.nesterov) {
        if (decay)
          sgd_update<T, true, SgdMomentum::First, true>(p, g, momentum_buffer, c);
        else
          sgd_update<T, false, SgdMomentum::First, true>(p, g, momentum_buffer, c);
      } else {
        if (decay)
          sgd_update<T, true, SgdMomentum::First, false>(p, g, momentum_buffer, c);
        else
          sgd_update<T, false, SgdMomentum::First, false>(p, g, momentum_buffer, c);
      }
      return;
    case SgdMomentum::Running:
      if (h.nesterov) {
        if (decay)
          sgd_update<T, true, SgdMomentum::Running, true>(p, g, momentum_buffer, c);
        else
          sgd_update<T, false, SgdMomentum::Running, true>(p, g, momentum_buffer, c);
      } else {
        if (decay)
          sgd_update<T, true, SgdMomentum::Running, false>(p, g, momentum_buffer, c);
        else
          sgd_update<T, false, SgdMomentum::Running, false>(p, g, momentum_buffer, c);
      }
      return;
  }
}

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled_weight_decay;  // AdamW
  bool amsgrad;
  double bias_correction1;       // 1 - beta1^step
  double bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  // Capturable Adam: the step count on the parameters' device, incremented by the backend before
  // the update; the kernels then take the bias corrections from it (adam_hyper_at_step), not from
  // the two fields above. Null: the fields above hold. Set by the backend, never by callers.
  const float* step = nullptr;
};

// The hyperparameters at `step` (the bias corrections). The host (plain Adam) and the kernels
// (capturable Adam, from the device's step count) both use this, so both give the same bits.
TG_HD AdamHyper adam_hyper_at_step(AdamHyper h, double step) {
#if defined(__CUDA_ARCH__)
  h.bias_correction1 = 1.0 - pow(h.beta1, step);
  h.bias_correction2_sqrt = sqrt(1.0 - pow(h.beta2, step));
#else
  h.bias_correction1 = 1.0 - std::pow(h.beta1, step);
  h.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, step));
#endif
  h.step = nullptr;
  return h;
}

// What the update of one step uses: `h` itself, or (capturable) `h` at the device's step count.
TG_HD AdamHyper adam_hyper_resolved(const AdamHyper& h) {
  return h.step != nullptr ? adam_hyper_at_step(h, static_cast<double>(*h.step)) : h;
}

enum class AdamDecay {
  None,       // weight_decay == 0
  L2,         // Adam: weight_decay * p added to the gradient
  Decoupled,  // AdamW: p scaled by 1 - lr * weight_decay before the update
};

TG_HD AdamDecay adam_decay_mode(const AdamHyper& h) {
  if (h.weight_decay == 0) return AdamDecay::None;
  return h.decoupled_weight_decay ? AdamDecay::Decoupled : AdamDecay::L2;
}

// AdamHyper's values converted to T once (each from the same double expression as PyTorch's).
template <class T>
struct AdamConstants {
  T decay_factor;  // 1 - lr * weight_decay
  T weight_decay;
  T one_minus_beta1, beta2, one_minus_beta2;
  T bias_correction2_sqrt, eps;
  T step_size;                    // lr / bias_correction1
  T bias_correction2_sqrt_recip;  // 1 / bias_correction2_sqrt, rounded in T
};

template <class T>
TG_HD AdamConstants<T> adam_constants(const AdamHyper& h) {
  const T bias_correction2_sqrt = static_cast<T>(h.bias_correction2_sqrt);
  return {static_cast<T>(1 - h.lr * h.weight_decay),
          static_cast<T>(h.weight_decay),
          static_cast<T>(1 - h.beta1),
          static_cast<T>(h.beta2),
          static_cast<T>(1 - h.beta2),
          bias_correction2_sqrt,
          static_cast<T>(h.eps),
          static_cast<T>(h.lr / h.bias_correction1),
          static_cast<T>(1) / bias_correction2_sqrt};
}

// Note [dividing by the bias correction without a division]: sqrt(v) / bias_correction2_sqrt, a
// division by the same number for every element, correctly rounded from a product with its
// reciprocal r and one correction: q = x r, e = x - q c (exact, by an FMA), then q + e r rounded
// once. Markstein's theorem (r the correctly rounded 1/c, q within an ulp of x / c, no underflow
// or overflow on the way) says that is x / c correctly rounded; and x = sqrt(v) of a float v is 0
// or at least 2^-75. Checked exhaustively for float (tools/checks/adam_division_exhaustive.cpp):
// every x in [2^-80, 2^70) and 0, against 68 divisors (sqrt(1 - beta2^t) for five beta2 and
// thirteen t, and a few others): not one bit differs. Infinite or NaN products are kept as they
// are, as division would give them. The CPU's vector divider is shared with the square root, and
// on a Xeon (AMX, 2 vCPUs) it bounds Adam's pass: one division in place of two took the pass over
// state in L2 from 0.61-0.70 to 0.42-0.44 ns an element (a loop of its own, one core), and
// bench_kernels' Adam step over mlp_seed's 517k parameters from 357 to 317-321 us on one thread,
// 185-189 to 162-164 on two. Float on the CPU only: the GPU and double keep the division.
template <class T>
TG_HD T divided_by_bias_correction(T x, const AdamConstants<T>& c) {
#if defined(__CUDA_ARCH__)
  return x / c.bias_correction2_sqrt;
#else
  if constexpr (std::is_same_v<T, float>) {
    const float q = x * c.bias_correction2_sqrt_recip;
    const float corrected = std::fma(std::fma(-q, c.bias_correction2_sqrt, x), c.bias_correction2_sqrt_recip, q);
    return q < std::numeric_limits<float>::infinity() ? corrected : q;
  } else {
    return x / c.bias_correction2_sqrt;
  }
#endif
}

// Updates p, the moments m and v, and (kAmsgrad) the running max of v, in place.
template <class T, AdamDecay kDecay, bool kAmsgrad>
TG_HD void adam_update(T& p, T g, T& m, T& v, T* v_max, const AdamConstants<T>& c) {
  if constexpr (kDecay == AdamDecay::Decoupled) p *= c.decay_factor;
  if constexpr (kDecay == AdamDecay::L2) g += c.weight_decay * p;
  m += (g - m) * c.one_minus_beta1;  // lerp, as PyTorch writes it
  v = c.beta2 * v + c.one_minus_beta2 * g * g;
  T second = v;
  if constexpr (kAmsgrad) {
    *v_max = *v_max > v ? *v_max : v;
    second = *v_max;
  }
  T denom = divided_by_bias_correction(optim_sqrt(second), c) + c.eps;
  p -= c.step_size * m / denom;
}

// Updates p, the moments m and v, and (amsgrad) the running max of v, in place.
template <class T>
TG_HD void adam_update(T& p, T g, T& m, T& v, T* v_max, const AdamHyper& h) {
  const AdamConstants<T> c = adam_constants<T>(h);
  const AdamDecay decay = adam_decay_mode(h);
  if (h.amsgrad) {
    if (decay == AdamDecay::None)
      adam_update<T, AdamDecay::None, true>(p, g, m, v, v_max, c);
    else if (decay == AdamDecay::L2)
      adam_update<T, AdamDecay::L2, true>(p, g, m, v, v_max, c);
    else
      adam_update<T, AdamDecay::Decoupled, true>(p, g, m, v, v_max, c);
  } else {
    if (decay == AdamDecay::None)
      adam_update<T, AdamDecay::None, false>(p, g, m, v, v_max, c);
    else if (decay == AdamDecay::L2)
      adam_update<T, AdamDecay::L2, false>(p, g, m, v, v_max, c);
    else
      adam_update<T, AdamDecay::Decoupled, false>(p, g, m, v, v_max, c);
  }
}

}  // namespace tapegrad::math
