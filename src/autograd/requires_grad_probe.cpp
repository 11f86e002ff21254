// The per-thread probe of Note [checkpoint probe].
#include "autograd/requires_grad_probe.h"

namespace tapegrad::autograd {

namespace {
thread_local RequiresGradProbe* t_active = nullptr;
}

RequiresGradProbe::RequiresGradProbe() : previous_(t_active) {
  t_active = this;
}

RequiresGradProbe::~RequiresGradProbe() {
  t_active = previous_;
  if (previous_ != nullptr && hit_) previous_->hit_ = true;
}

void RequiresGradProbe::note(const std::vector<Tensor>& inputs) {
  RequiresGradProbe* probe = t_active;
  if (probe == nullptr || probe->hit_) return;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) {
      probe->hit_ = true;
      return;
    }
}

}  // namespace tapegrad::autograd
