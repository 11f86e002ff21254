// Reductions over all elements or over given dims (negative dims count from the end).
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad {

// Integral and bool inputs sum to int64; floating-point inputs keep their dtype (and accumulate in f64).
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);  // floating-point inputs only
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
// Variance with `correction` (1 = unbiased, PyTorch's default; 0 = population). Name dims as a
// Shape: var(x, Shape{1}); a braced var(x, {1}) would pick the first overload (correction = 1).
Tensor var(const Tensor& x, double correction = 1.0);
Tensor var(const Tensor& x, const Shape& dims, double correction = 1.0, bool keepdim = false);

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};
// Largest/smallest value of all elements (a 0-dim tensor); the gradient flows to the first one.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// Along one dim, with the (first) index where it occurs.
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor

}  // namespace tapegrad
