// Closeness tests, with PyTorch's semantics: a and b are close where a == b (so equal infinities
// are), or where |a - b| is finite and |a - b| <= atol + rtol * |b|. NaN is close to NaN only with
// equal_nan. a and b broadcast, must have the same dtype and device; rtol and atol must be >= 0.
// Integral and bool tensors are compared in float64. Not differentiable.
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad {

// A bool tensor of the broadcast shape.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Whether every element is close (true for empty tensors). Reads the answer back to the host.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);

}  // namespace tapegrad
