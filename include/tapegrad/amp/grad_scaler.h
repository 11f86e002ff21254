// Loss scaling for float16 training, with the semantics of PyTorch's torch.cuda.amp.GradScaler:
// the loss is multiplied by a large scale so that small float16 gradients do not flush to zero,
// the gradients are divided by it again before the optimiser uses them, and a step whose
// gradients hold inf or NaN is skipped and the scale lowered.
//
//   amp::GradScaler scaler;                      // init_scale 65536, growth 2, backoff 0.5, 2000
//   for (...) {
//     opt.zero_grad();
//     Tensor loss = cross_entropy(model.forward(x), y);
//     scaler.scale(loss).backward();
//     scaler.unscale_(opt);                      // optional: clip the true gradients
//     nn::utils::clip_grad_norm_(model.parameters(), 1.0);
//     scaler.step(opt);                          // skipped when a gradient is inf or NaN
//     scaler.update();
//   }
//
// The scale, and each device's found-inf flag and inverse scale, are one-element float32 tensors
// on the devices involved. unscale_ checks and unscales all of an optimiser's gradients on a device
// in one fused pass (the non_finite_check_and_unscale kernel) without waiting for the device; the
// host reads each device's flag once, in step() (or in update() when step() was not called).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "tapegrad/core/tensor.h"
#include "tapegrad/optim/optimizer.h"

namespace tapegrad::amp {

class GradScaler {
 public:
  // Throws tapegrad::Error for init_scale not finite and > 0, growth_factor <= 1, backoff_factor
  // outside (0, 1), or growth_interval <= 0. A disabled scaler checks nothing and every method is
  // a pass-through: scale() returns its argument, step() calls optimizer.step(), get_scale() is 1.
  explicit GradScaler(double init_scale = 65536.0, double growth_factor = 2.0, double backoff_factor = 0.5,
                      int64_t growth_interval = 2000, bool enabled = true);

  // outputs * scale (differentiable; the result has outputs' dtype). The first call creates the
  // scale on outputs' device. Throws for an undefined or non-floating-point tensor.
  Tensor scale(const Tensor& outputs);
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);

  // Divides every gradient of the optimiser's parameters (all groups; f32, f64, f16 or bf16,
  // computed in f32 for the 16-bit ones) by the scale in place, and records per device whether any
  // was inf or NaN. At most once per optimiser between update() calls, and not after step():
  // both throw, as in PyTorch, as does a call before the first scale().
  void unscale_(optim::Optimizer& optimizer);

  // Unscales the gradients if unscale_ was not called, then runs optimizer.step() unless a
  // gradient was inf or NaN. Returns whether the step ran. Throws when called twice before
  // update(), or when none of the optimiser's parameters has a gradient.
  bool step(optim::Optimizer& optimizer);

  // PyTorch's rule, on every optimiser stepped or unscaled since the last update(): if any
  // gradient was inf or NaN, scale *= backoff_factor and the growth tracker resets to 0; otherwise
  // after growth_interval successful steps in a row scale *= growth_factor (unless that overflows
  // float32) and the tracker resets. The scale is stored in float32, as in PyTorch.
  void update();
  // Sets the scale to new_scale (finite, > 0) instead; the growth tracker is left as it is.
  void update(double new_scale);

  // The current scale (init_scale before the first scale()); 1 when disabled.
  double get_scale() const;
  double get_growth_factor() const { return growth_factor_; }
  double get_backoff_factor() const { return backoff_factor_; }
  int64_t get_growth_interval() const { return growth_interval_; }
  // Steps since the last backoff or growth.
  int64_t get_growth_tracker() const { return growth_tracker_; }
  void set_growth_factor(double v);  // same checks as the constructor
  void set_backoff_factor(double v);
  void set_growth_interval(int64_t v);
  bool is_enabled() const { return enabled_; }

  // PyTorch's keys, as 0-dim CPU tensors: "scale" (float32), "growth_factor", "backoff_factor"
  // (float64), "growth_interval" (int64), "_growth_tracker" (int32). Empty when disabled.
  StateDict state_dict() const;
  // Loads a state_dict(); extra keys are ignored. Throws, changing nothing, for an empty dict, a
  // missing key or an invalid value (naming the key). Does nothing when disabled.
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    std::vector<Tensor> found_inf_per_device;  // one-element float32, one per device with gradients
    bool read = false;                         // whether found_any was read back already
    bool found_any = false;
  };

  void check_started(const char* method) const;
  bool read_found_inf(OptimizerState& state) const;

  bool enabled_;
  double init_scale_, growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  float scale_value_;  // the host's copy of scale_: only this class writes it
  int64_t growth_tracker_ = 0;
  Tensor scale_;  // created by the first scale(), on that call's device
  std::map<const optim::Optimizer*, OptimizerState> states_;
};

}  // namespace tapegrad::amp
