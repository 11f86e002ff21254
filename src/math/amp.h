// GradScaler's per-element unscale, shared by the CPU loop and the CUDA kernel (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_). A is the type computed in: float for 16-bit
// gradients, else the gradient's own type. Host+device.
#pragma once

#include "math/host_device.h"

namespace tapegrad::math {

// v - v is 0 for every finite v and NaN for inf and NaN; no libm call, so the same on both sides.
template <class A>
TG_HD bool is_finite(A v) {
  return v - v == A(0);
}

// g * inv_scale, computed as PyTorch does (a float inv_scale, promoted to A); where inv_scale is
// 1 the value passes through untouched, NaN payloads and all.
template <class A>
TG_HD A unscale_value(A g, float inv_scale) {
  return inv_scale == 1.0f ? g : g * static_cast<A>(inv_scale);
}

}  // namespace tapegrad::math
