// Loss modules over the functional losses in tapegrad/ops/loss.h.
#pragma once

#include "tapegrad/ops/loss.h"

namespace tapegrad::nn {

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : options_(options) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const { return cross_entropy(logits, target, options_); }

 private:
  CrossEntropyOptions options_;
};

class MSELoss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction_); }

 private:
  Reduction reduction_;
};

}  // namespace tapegrad::nn
