// Note [checkpoint probe]: checkpoint() runs its function with grad mode off, yet its outputs must
// require grad whenever they would have without checkpointing, also when only parameters captured
// by the function (not its inputs) require grad. While a probe is active on a thread,
// any_requires_grad(), which every op asks before recording, notes whether an op ran with grad
// mode off on an input that requires grad. Internal to the autograd layer.
#pragma once

#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad::autograd {

class RequiresGradProbe {
 public:
  RequiresGradProbe();   // becomes this thread's active probe
  ~RequiresGradProbe();  // the previous probe becomes active again, and sees this one's hit
  RequiresGradProbe(const RequiresGradProbe&) = delete;
  RequiresGradProbe& operator=(const RequiresGradProbe&) = delete;

  bool hit() const { return hit_; }

  // Called by any_requires_grad() when grad mode is off.
  static void note(const std::vector<Tensor>& inputs);

 private:
  RequiresGradProbe* previous_;
  bool hit_ = false;
};

}  // namespace tapegrad::autograd
