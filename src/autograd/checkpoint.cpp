// checkpoint(): a tape node whose backward re-runs the function under grad mode and backpropagates
// through the recomputation (torch.utils.checkpoint). Forward keeps the inputs (as SavedTensors,
// so an in-place change is caught), the random numbers fn drew and the autocast state; nothing fn
// made.
#include "tapegrad/autograd/checkpoint.h"

#include <memory>
#include <optional>
#include <string>

#include "autograd/requires_grad_probe.h"
#include "core/generator_replay.h"
#include "tapegrad/amp/autocast.h"
#include "tapegrad/autograd/engine.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/autograd/node.h"

namespace tapegrad {

namespace {

using autograd::SavedTensor;

// Sets grad mode for a scope and puts the previous mode back, also when fn throws.
class GradModeScope {
 public:
  explicit GradModeScope(bool enabled) : previous_(autograd::grad_enabled()) { autograd::set_grad_enabled(enabled); }
  ~GradModeScope() { autograd::set_grad_enabled(previous_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool previous_;
};

// Puts the forward's autocast state of every device kind in place for a scope (enabled or not, and
// the type), then the previous one back, also when fn throws.
class AutocastScope {
 public:
  struct State {
    bool enabled;
    DType dtype;
  };
  explicit AutocastScope(const State (&states)[kNumDeviceKinds])
      : cpu_(kCPU, states[static_cast<int>(DeviceKind::CPU)].dtype, states[static_cast<int>(DeviceKind::CPU)].enabled),
        cuda_(kCUDA, states[static_cast<int>(DeviceKind::CUDA)].dtype,
              states[static_cast<int>(DeviceKind::CUDA)].enabled) {}
  static void capture(State (&states)[kNumDeviceKinds]) {
    for (int k = 0; k < kNumDeviceKinds; ++k)
      states[k] = {amp::is_autocast_enabled(static_cast<DeviceKind>(k)),
                   amp::autocast_dtype(static_cast<DeviceKind>(k))};
  }

 private:
  static_assert(kNumDeviceKinds == 2, "AutocastScope: one guard per device kind");
  amp::AutocastGuard cpu_, cuda_;
};

// What the node keeps between forward and backward.
struct CheckpointState {
  CheckpointFunction fn;
  std::vector<SavedTensor> inputs;
  std::vector<bool> input_requires_grad;
  bool preserve_rng_state;
  detail::GeneratorDraws draws;                    // every draw fn made in the forward, from any generator
  AutocastScope::State autocast[kNumDeviceKinds];  // the forward's, put in place for the recomputation
  std::vector<size_t> recorded;                    // the outputs given to the node (the floating-point ones)
  std::vector<Shape> output_sizes;                 // every output's shape, to check the recomputation
};

void check_outputs(const std::vector<Tensor>& outputs, const char* when) {
  TG_CHECK(!outputs.empty(), "checkpoint: fn returned no tensor ", when,
           "; it must return at least one (a Tensor or a non-empty std::vector<Tensor>)");
  for (size_t i = 0; i < outputs.size(); ++i)
    TG_CHECK(outputs[i].defined(), "checkpoint: output ", i, " of fn is undefined ", when);
}

std::vector<Tensor> recompute_and_backward(const CheckpointState& state, const std::vector<Tensor>& grads) {
  // Fresh leaves on the saved inputs' memory: the recomputation's graph ends at them, and their
  // .grad() is what this node passes on. get() throws if an input was changed in place.
  std::vector<Tensor> leaves;
  leaves.reserve(state.inputs.size());
  for (size_t i = 0; i < state.inputs.size(); ++i) {
    Tensor leaf = state.inputs[i].get().detach();
    if (state.input_requires_grad[i]) leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }
  std::vector<Tensor> outputs;
  {
    // The forward's random numbers, from whichever generators it drew them (Note [generator
    // replay]); the generators themselves are not touched.
    std::optional<detail::GeneratorReplay> rng;
    if (state.preserve_rng_state) rng.emplace(state.draws, "checkpoint");
    // As in PyTorch: backward usually runs outside the autocast region, but the recomputation
    // must compute in the forward's precision, on every device kind.
    AutocastScope autocast(state.autocast);
    GradModeScope grad_mode(true);
    outputs = state.fn(leaves);
    if (rng) rng->expect_all_drawn();
  }
  check_outputs(outputs, "when recomputed in backward");
  TG_CHECK(outputs.size() == state.output_sizes.size(), "checkpoint: fn returned ", outputs.size(),
           " tensors when recomputed in backward, but ", state.output_sizes.size(),
           " in the forward pass; it must do the same work each time");
  for (size_t i = 0; i < outputs.size(); ++i)
    TG_CHECK(outputs[i].sizes() == state.output_sizes[i], "checkpoint: output ", i, " has shape ",
             shape_str(outputs[i].sizes()), " when recomputed in backward, but ", shape_str(state.output_sizes[i]),
             " in the forward pass; it must do the same work each time");
  std::vector<Tensor> roots, root_grads;
  for (size_t k = 0; k < state.recorded.size(); ++k) {
    const Tensor& out = outputs[state.recorded[k]];
    if (!out.requires_grad() || !grads[k].defined()) continue;  // does not depend on anything needing grad
    roots.push_back(out);
    root_grads.push_back(grads[k]);
  }
  std::vector<Tensor> input_grads(leaves.size());
  if (roots.empty()) return input_grads;
  // The recomputed graph is used once and freed; retain_graph of the outer pass keeps this node
  // (and so the saved inputs), which is all a second backward needs.
  autograd::backward(roots, root_grads, /*retain_graph=*/false);
  for (size_t i = 0; i < leaves.size(); ++i)
    if (state.input_requires_grad[i]) input_grads[i] = leaves[i].grad();
  return input_grads;
}

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               bool preserve_rng_state) {
  TG_CHECK(static_cast<bool>(fn), "checkpoint: fn is empty");
  for (size_t i = 0; i < inputs.size(); ++i) TG_CHECK(inputs[i].defined(), "checkpoint: input ", i, " is undefined");
  if (!autograd::grad_enabled()) {  // nothing is recorded, so nothing is recomputed
    std::vector<Tensor> outputs = fn(inputs);
    check_outputs(outputs, "");
    return outputs;
  }
  auto state = std::make_shared<CheckpointState>();
  state->preserve_rng_state = preserve_rng_state;
  AutocastScope::capture(state->autocast);
  std::vector<Tensor> outputs;
  bool used_grad = false;  // Note [checkpoint probe]
  {
    std::optional<detail::GeneratorRecording> recording;
    if (preserve_rng_state) recording.emplace(state->draws);
    autograd::RequiresGradProbe probe;
    GradModeScope no_grad(false);
    outputs = fn(inputs);
    used_grad = probe.hit();
  }
  check_outputs(outputs, "");
  bool any_input_requires_grad = false;
  for (const Tensor& input : inputs) {
    state->inputs.emplace_back(input);
    state->input_requires_grad.push_back(input.requires_grad());
    any_input_requires_grad = any_input_requires_grad || input.requires_grad();
  }
  if (!used_grad && !any_input_requires_grad) return outputs;
  // Detached, so that an output that is an input (or a view of one) gets a history of its own
  // without rewriting the input's.
  std::vector<Tensor> recorded;
  for (size_t i = 0; i < outputs.size(); ++i) {
    state->output_sizes.push_back(outputs[i].sizes());
    outputs[i] = outputs[i].detach();
    if (!outputs[i].is_floating_point()) continue;
    state->recorded.push_back(i);
    recorded.push_back(outputs[i]);
  }
  if (recorded.empty()) return outputs;
  state->fn = fn;
  autograd::record("CheckpointBackward", inputs, recorded,
                   [state](const std::vector<Tensor>& grads) { return recompute_and_backward(*state, grads); });
  return outputs;
}

}  // namespace tapegrad
