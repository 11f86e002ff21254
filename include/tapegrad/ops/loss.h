// Softmax and the losses built on it, and the elementwise losses. Formulas and defaults follow
// PyTorch (torch.nn.functional); docs/losses.md lists them all.
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
  // Optional per-class weight [C] (floating point, on the input's device; cast to the input's dtype).
  // Each row's loss is scaled by weight[target], and the mean divides by the sum of those weights
  // over the rows not ignored, like PyTorch. No gradient flows to it.
  Tensor weight;
};

// Fused log-softmax + negative log-likelihood. `logits` is [N, C] (or [C]); `target` holds class
// indices (int64 or int32) of shape [N] (or []). Mean reduction divides by the number of targets
// that are not ignore_index, like PyTorch. A target outside [0, C) throws tapegrad::Error.
// A -inf logit (a masked class) is allowed: its probability is 0 and its gradient 0; with
// label_smoothing > 0 it makes the loss +inf, as in PyTorch.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// -log_probs[n, target[n]] (times weight[target[n]]); label_smoothing must be 0.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& options = {});

// The elementwise losses below take `input` and `target` of the same shape (a mismatch throws
// tapegrad::Error naming the loss and both shapes), floating point, on one device, and are
// differentiable in both. Mean reduction over an empty input throws.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// |input - target|.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// d = |input - target|: 0.5 d^2 / beta where d < beta, else d - 0.5 beta. beta = 0 is l1_loss;
// beta < 0 throws.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
// d = |input - target|: 0.5 d^2 where d < delta, else delta (d - 0.5 delta). delta <= 0 throws.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);

struct BCEWithLogitsOptions {
  Reduction reduction = Reduction::Mean;
  Tensor weight;      // optional, broadcast to the input's shape: scales each element's loss
  Tensor pos_weight;  // optional, broadcast to the input's shape (e.g. [C] for input [N, C]): weighs positives
};

// Sigmoid + binary cross-entropy in one numerically stable expression, for logits x and targets
// y in [0, 1] (not checked, like PyTorch): with lw = 1 + (pos_weight - 1) y,
//   loss = weight * ((1 - y) x - lw * log_sigmoid(x)),  log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)),
// which never overflows (|x| = 1e4 is fine). Differentiable in input and target.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsOptions& options = {});

}  // namespace tapegrad
