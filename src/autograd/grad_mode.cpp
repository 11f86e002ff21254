// Grad mode and inference mode are per thread, so two threads can train (or infer) independently.
#include "tapegrad/autograd/grad_mode.h"

namespace tapegrad::autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_inference_mode = false;
}  // namespace

bool grad_enabled() {
  return t_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  t_grad_enabled = enabled;
}

bool inference_mode_enabled() {
  return t_inference_mode;
}

// Entering turns grad mode off; InferenceMode(false) leaves grad mode as it is, so a nested
// InferenceMode(false) under NoGradGuard still records nothing.
InferenceMode::InferenceMode(bool enabled) : previous_grad_(t_grad_enabled), previous_inference_(t_inference_mode) {
  t_inference_mode = enabled;
  if (enabled) t_grad_enabled = false;
}

InferenceMode::~InferenceMode() {
  t_grad_enabled = previous_grad_;
  t_inference_mode = previous_inference_;
}

}  // namespace tapegrad::autograd
