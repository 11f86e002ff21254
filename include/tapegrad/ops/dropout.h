// Functional dropout (PyTorch's torch.nn.functional.dropout), shared by nn::Dropout and the
// LSTM's dropout between layers.
#pragma once

#include "tapegrad/core/generator.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad {

// While `training`, zeroes each element of x with probability p (drawing one uniform number per
// element from `generator`, default_generator() when null, and keeping those >= p) and scales the
// kept ones by 1/(1-p); differentiable in x. Returns x itself when !training or p == 0, and x * 0
// (no random draw) when p == 1. Throws tapegrad::Error for p outside [0, 1], an undefined x, or
// (when it would drop) an x that is not floating point.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* generator = nullptr);

}  // namespace tapegrad
