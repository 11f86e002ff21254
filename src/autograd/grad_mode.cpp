// Grad mode is per thread, so two threads can train (or infer) independently.
#include "tapegrad/autograd/grad_mode.h"

namespace tapegrad::autograd {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() {
  return t_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  t_grad_enabled = enabled;
}

}  // namespace tapegrad::autograd
