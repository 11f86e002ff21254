// Normalisation ops (torch.nn.functional's layer_norm and rms_norm); the modules are nn::LayerNorm
// and nn::RMSNorm in tapegrad/nn/normalization.h.
#pragma once

#include <optional>

#include "tapegrad/core/tensor.h"

namespace tapegrad {

// Normalises `input` over its last normalized_shape.size() dims, which must equal
// `normalized_shape`, then scales and shifts (PyTorch's F.layer_norm):
//   y = (x - mean) / sqrt(var + eps) * weight + bias
// with mean and the biased variance taken over those dims. `weight` and `bias` (either may be
// undefined: 1 and 0) have shape normalized_shape and input's dtype and device. One fused kernel
// forward and backward (one tape node); gradients flow to input, weight and bias. float32/float64
// (and float16/bfloat16 on CUDA, computed in float32).
// Throws tapegrad::Error for an empty normalized_shape, one that does not match the trailing dims
// of input, a weight or bias of another shape, dtype or device, and eps <= 0, NaN or infinite.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// Root-mean-square normalisation over the last normalized_shape.size() dims of `input`, which must
// equal `normalized_shape`, then a scale (PyTorch's F.rms_norm):
//   y = x / sqrt(mean(x^2) + eps) * weight
// with the mean taken over those dims. `weight` (may be undefined: 1) has shape normalized_shape
// and input's device; a weight of another floating dtype is used as PyTorch does: both computed in
// their promoted dtype, the result returned in input's. eps defaults to the machine epsilon of the
// compute type, as PyTorch's: float64's (2.22e-16) for a float64 input, float32's (1.19e-7) for
// float32, float16 and bfloat16 ones (16-bit inputs are computed in float32). One fused kernel
// forward and backward (one tape node); gradients flow to input and weight.
// Throws tapegrad::Error for an empty normalized_shape, one that does not match the trailing dims
// of input, a weight of another shape or device or a non-floating one, and eps < 0, NaN or
// infinite.
Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

}  // namespace tapegrad
