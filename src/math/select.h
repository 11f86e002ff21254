// where and clamp, host+device. clamp decides in double like the ops that call it, so integer and
// floating tensors compare against the exact bounds the user passed.
#pragma once

#include "math/host_device.h"

namespace tapegrad::math {

template <class T>
TG_HD T select(bool condition, T a, T b) {
  return condition ? a : b;
}

// torch.clamp: NaN stays NaN (both comparisons are false). A bound is converted to T only where it
// is the result, so an out-of-range bound of an integer tensor is never converted.
template <class T>
TG_HD T clamp_value(T v, double lo, double hi) {
  const double d = static_cast<double>(v);
  if (d < lo) return static_cast<T>(lo);
  if (d > hi) return static_cast<T>(hi);
  return v;
}

}  // namespace tapegrad::math
