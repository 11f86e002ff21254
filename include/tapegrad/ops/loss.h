// Softmax and the losses built on it.
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

enum class Reduction { None, Mean, Sum };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;   // targets equal to this add nothing and count for nothing
  double label_smoothing = 0.0;  // in [0, 1]
};

// Fused log-softmax + negative log-likelihood. `logits` is [N, C] (or [C]); `target` holds class
// indices (int64 or int32) of shape [N] (or []). Mean reduction divides by the number of targets
// that are not ignore_index, like PyTorch. A target outside [0, C) throws tapegrad::Error.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace tapegrad
