// relu and its backward on float16 and bfloat16 tensors without widening them (relu_16bit.cpp).
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad::cpu {

// out = relu(x). Returns false, doing nothing, unless x and out are contiguous tensors of one
// 16-bit floating dtype; the caller then takes the float path, whose bits these are.
bool relu_16bit(const Tensor& x, const Tensor& out);

// grad_x = x > 0 ? grad : 0, under the same condition on all three tensors.
bool relu_backward_16bit(const Tensor& grad, const Tensor& x, const Tensor& grad_x);

}  // namespace tapegrad::cpu
