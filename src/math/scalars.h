// The scalar parameters a pointwise op carries through its kernel slot (leaky_relu's slope,
// softplus's beta and threshold): the ops pass them as doubles, and each kernel converts them once,
// before its loop, to the type it computes in. Host+device.
#pragma once

#include "math/host_device.h"

namespace tapegrad::math {

// Up to two scalar parameters, in type T; ops without parameters leave and ignore them.
template <class T>
struct Scalars {
  T a = T(0), b = T(0);

  template <class U>
  TG_HD Scalars<U> to() const {
    return Scalars<U>{static_cast<U>(a), static_cast<U>(b)};
  }
};

}  // namespace tapegrad::math
