// Matrix products through the backend's GEMM (OpenBLAS on the CPU). Transposed inputs are read
// through their strides, without a copy.
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad {

Tensor mm(const Tensor& a, const Tensor& b);   // [n, k] x [k, m] -> [n, m]
Tensor bmm(const Tensor& a, const Tensor& b);  // [B, n, k] x [B, k, m] -> [B, n, m]
// NumPy matmul: 1-D operands are promoted and the batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// beta * input + alpha * (a @ b), input broadcast to [n, m].
Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
// x @ weight^T + bias, for x of shape [..., in], weight [out, in], bias [out] (may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// relu(linear(x, weight, bias)), the same numbers. When nothing is recorded (no grad mode, or no
// input requires grad) it is one op: on CUDA one cuBLASLt product whose epilogue adds the bias and
// clamps, on the CPU the product starting from the bias and the clamp in place on its output while
// that is still in cache, with no second tensor. When a gradient is wanted it records linear and
// relu as two ops. nn::Sequential uses it for a Linear followed by a ReLU when nothing is recorded.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace tapegrad
