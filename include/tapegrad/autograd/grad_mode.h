// Grad mode and inference mode: whether ops record themselves on the tape. Per thread, like
// PyTorch, so one thread can train while others serve the same model.
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

bool inference_mode_enabled();

// InferenceMode: NoGradGuard for code that will never need a gradient of what it computes, as
// torch::InferenceMode. Inside it:
//   - nothing is recorded (grad mode is off) and nothing is saved for a backward;
//   - every tensor made is an *inference tensor* (Tensor::is_inference()): its in-place updates
//     bump no version counter, and modules may keep work between calls that depends on their
//     weights not changing behind the library's back (the CPU LSTM keeps its weights' packed
//     layout: Note [kept weight layouts]);
//   - tensors made outside it (parameters, inputs) are read as usual.
// An inference tensor can never enter autograd: an op that would record it for a backward, and
// requires_grad_(true) on it, throw tapegrad::Error naming the op; an in-place update of one
// outside InferenceMode throws too (it would escape version counting). clone() it outside the
// mode to get a normal tensor. InferenceMode(false) inside an InferenceMode scope turns it off
// for a nested scope (grad mode stays as the outer scope left it).
//
// Threads: the mode is per thread. Forward calls of one shared module from several threads,
// each under its own InferenceMode, are safe (docs/inference.md says what that covers).
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  static bool is_enabled() { return inference_mode_enabled(); }

 private:
  bool previous_grad_, previous_inference_;
};

}  // namespace tapegrad::autograd

namespace tapegrad {
using autograd::InferenceMode;
using autograd::NoGradGuard;
}  // namespace tapegrad
