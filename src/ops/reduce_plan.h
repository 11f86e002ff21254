// How a reduction over a set of dims is laid out for the backend's [outer, reduced, inner] kernels.
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad::ops {

struct ReducePlan {
  Tensor input;  // contiguous, detached: what the kernel reads
  int64_t outer = 1, reduced = 1, inner = 1;
  Shape kept_shape;  // the output with reduced dims kept as size 1
  Shape out_shape;   // the output as returned (keepdim or not)
};

// `dims` empty means all dims. Duplicate or out-of-range dims throw naming `op`.
ReducePlan plan_reduction(const char* op, const Tensor& x, const Shape& dims, bool keepdim);

}  // namespace tapegrad::ops
