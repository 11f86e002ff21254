// The optimiser base: parameter list, learning rate, zero_grad.
#include <cmath>
#include <set>

#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/optim/optimizer.h"

namespace tapegrad::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  TG_CHECK(std::isfinite(lr) && lr >= 0, "optimizer: invalid learning rate ", lr);
  std::set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    TG_CHECK(params_[i].defined(), "optimizer: parameter ", i, " is undefined");
    TG_CHECK(params_[i].is_leaf() && params_[i].requires_grad(), "optimizer: parameter ", i,
             " must be a leaf that requires grad");
    // Listed twice, a parameter would be updated twice per step with two sets of state (PyTorch
    // refuses this too).
    TG_CHECK(seen.insert(params_[i].impl()).second, "optimizer: parameter ", i,
             " appears more than once in the parameter list");
  }
}

void Optimizer::set_lr(double lr) {
  TG_CHECK(std::isfinite(lr) && lr >= 0, "optimizer: invalid learning rate ", lr);
  lr_ = lr;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      Tensor g = p.grad();
      g.zero_();
    }
  }
}

}  // namespace tapegrad::optim
