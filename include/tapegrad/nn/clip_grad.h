// Gradient clipping, like torch.nn.utils: call between backward() and the optimiser's step().
//
//   loss.backward();
//   Tensor norm = nn::utils::clip_grad_norm_(model.parameters(), /*max_norm=*/1.0);
//   opt.step();
#pragma once

#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad::nn::utils {

// Scales every gradient of `params` in place by min(1, max_norm / (total_norm + 1e-6)), where
// total_norm is the norm_type-norm of all the gradients together, as if concatenated into one
// vector (norm_type > 0, or infinity for the largest magnitude). Parameters without a gradient are
// skipped. Returns total_norm (before clipping) as a 0-dim tensor on the first gradient's device,
// in the gradients' (promoted) dtype; a float32 0 on the CPU when no parameter has a gradient.
// The norm and the scale factor are computed on the gradients' device, so on a GPU nothing waits
// for the host, unless error_if_nonfinite, which reads the norm back and throws tapegrad::Error
// when it is NaN or infinite (the gradients are then left unchanged). Throws for a negative or NaN
// max_norm, a norm_type <= 0 or NaN, an undefined parameter or a gradient that is not
// floating-point.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient of `params` in place to [-clip_value, clip_value]; parameters without a
// gradient are skipped. Throws for a negative or NaN clip_value.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace tapegrad::nn::utils
