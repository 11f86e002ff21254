// Normalisation ops (torch.nn.functional's layer_norm); the module is nn::LayerNorm in
// tapegrad/nn/normalization.h.
#pragma once

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

}  // namespace tapegrad
