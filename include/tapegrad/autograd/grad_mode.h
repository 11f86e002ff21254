// Grad mode: whether ops record themselves on the tape. Per thread, like PyTorch.
#pragma once

namespace tapegrad::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Turns recording off for its scope (inference, optimiser updates, weight initialisation).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tapegrad::autograd

namespace tapegrad {
using autograd::NoGradGuard;
}
