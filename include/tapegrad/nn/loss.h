// Loss modules over the functional losses in tapegrad/ops/loss.h, named and defaulted like
// PyTorch's torch.nn losses. Each is called as loss(input, target).
#pragma once

#include "tapegrad/ops/loss.h"

namespace tapegrad::nn {

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : options_(options) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return cross_entropy(logits, target, options_);
  }

 private:
  CrossEntropyOptions options_;
};

// Over log-probabilities (e.g. log_softmax's output); options.label_smoothing must stay 0.
class NLLLoss {
 public:
  explicit NLLLoss(CrossEntropyOptions options = {}) : options_(options) {}
  Tensor operator()(const Tensor& log_probs, const Tensor& target) const {
    return nll_loss(log_probs, target, options_);
  }

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

class L1Loss {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const { return l1_loss(input, target, reduction_); }

 private:
  Reduction reduction_;
};

class SmoothL1Loss {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::Mean, double beta = 1.0)
      : reduction_(reduction), beta_(beta) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return smooth_l1_loss(input, target, reduction_, beta_);
  }

 private:
  Reduction reduction_;
  double beta_;
};

class HuberLoss {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::Mean, double delta = 1.0)
      : reduction_(reduction), delta_(delta) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return huber_loss(input, target, reduction_, delta_);
  }

 private:
  Reduction reduction_;
  double delta_;
};

class BCEWithLogitsLoss {
 public:
  explicit BCEWithLogitsLoss(BCEWithLogitsOptions options = {}) : options_(options) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy_with_logits(input, target, options_);
  }

 private:
  BCEWithLogitsOptions options_;
};

}  // namespace tapegrad::nn
