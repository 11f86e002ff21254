// a * b + c with the product rounded before the sum, on both sides. nvcc fuses a plain `a * b + c`
// into one FMA on the device while the host compiler (ISO mode, no -mfma) does not; the two would
// then round differently, and values meant to be bit-identical across devices (arange, the random
// draws) would not be.
#pragma once

#include <cstdint>

#include "math/host_device.h"

namespace tapegrad::math {

TG_HD double mul_add_unfused(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(__dmul_rn(a, b), c);  // the _rn intrinsics are never contracted
#else
  return a * b + c;
#endif
}

// Element i of arange(start, step), before conversion to the output dtype.
TG_HD double arange_value(double start, double step, int64_t i) {
  return mul_add_unfused(static_cast<double>(i), step, start);
}

}  // namespace tapegrad::math
