// Elementwise ops. Binary ops broadcast like NumPy and promote dtypes like PyTorch: two tensors
// meet at promote_types(a, b); a scalar keeps the tensor's dtype unless the tensor is integral and
// the scalar is not (then float32). All are differentiable in their floating-point inputs.
#pragma once

#include <limits>

#include "tapegrad/core/tensor.h"

namespace tapegrad {

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // the exact (erf) form, PyTorch's default
Tensor silu(const Tensor& x);  // x * sigmoid(x) (PyTorch's silu, also called swish)
Tensor square(const Tensor& x);

// Parameterised activations, with PyTorch's formulas and defaults (torch.nn.functional). An
// integer input is computed in float32. The parameters must be finite (beta also nonzero, and
// threshold not NaN); anything else throws tapegrad::Error naming the op and the parameter.
// leaky_relu(x) = x > 0 ? x : negative_slope * x
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// softplus(x) = log(1 + exp(beta * x)) / beta, or x itself where beta * x > threshold
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
// elu(x) = x > 0 ? x : alpha * (exp(x) - 1)
Tensor elu(const Tensor& x, double alpha = 1.0);

Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor pow(double base, const Tensor& exponent);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);

// Comparisons give bool tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// condition ? a : b, elementwise with broadcasting; `condition` must be bool.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, double b);
// Limits x to [min, max]; the gradient is passed where min <= x <= max.
Tensor clamp(const Tensor& x, double min = -std::numeric_limits<double>::infinity(),
             double max = std::numeric_limits<double>::infinity());

}  // namespace tapegrad
