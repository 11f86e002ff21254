// Optimisers: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW, with PyTorch's
// exact update rules and defaults. A step updates the parameters that share a device, a dtype and
// a step count together, in one multi-tensor pass where the backend has one (one or a few kernel
// launches for a whole model on a GPU), else in one fused pass per parameter. foreach(false)
// forces the per-parameter passes; on the CPU both give bit-identical results.
//
//   optim::Adam opt(model.parameters(), optim::AdamOptions().lr(1e-3));
//   loss.backward(); opt.step(); opt.zero_grad();
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad::optim {

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient (runs without recording).
  virtual void step() = 0;
  // Clears gradients: to undefined (default, like PyTorch 2) or to zeros in place.
  void zero_grad(bool set_to_none = true);
  double lr() const { return lr_; }
  void set_lr(double lr);  // used by learning-rate schedulers
  const std::vector<Tensor>& params() const { return params_; }
  // The optimiser's state as named tensors ("0.exp_avg", "step", ...), for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor>> state_dict() const = 0;
  virtual void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) = 0;

 protected:
  std::vector<Tensor> params_;
  double lr_;
};

struct SGDOptions {
  SGDOptions(double lr = 0.01) : lr_(lr) {}
  SGDOptions& lr(double v) { lr_ = v; return *this; }
  SGDOptions& momentum(double v) { momentum_ = v; return *this; }
  SGDOptions& dampening(double v) { dampening_ = v; return *this; }
  SGDOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  SGDOptions& nesterov(bool v) { nesterov_ = v; return *this; }
  SGDOptions& foreach(bool v) { foreach_ = v; return *this; }  // multi-tensor updates where available
  double lr_, momentum_ = 0, dampening_ = 0, weight_decay_ = 0;
  bool nesterov_ = false;
  bool foreach_ = true;
};

class SGD : public Optimizer {
 public:
  // Throws for a negative or NaN lr/momentum/weight decay, or nesterov without momentum.
  SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  void step() override;
  std::vector<std::pair<std::string, Tensor>> state_dict() const override;
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;  // undefined until a parameter's first step
};

struct AdamOptions {
  AdamOptions(double lr = 1e-3) : lr_(lr) {}
  AdamOptions& lr(double v) { lr_ = v; return *this; }
  AdamOptions& betas(double b1, double b2) { beta1_ = b1; beta2_ = b2; return *this; }
  AdamOptions& eps(double v) { eps_ = v; return *this; }
  AdamOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  AdamOptions& amsgrad(bool v) { amsgrad_ = v; return *this; }
  AdamOptions& foreach(bool v) { foreach_ = v; return *this; }  // multi-tensor updates where available
  double lr_, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
  bool amsgrad_ = false;
  bool foreach_ = true;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  void step() override;
  std::vector<std::pair<std::string, Tensor>> state_dict() const override;
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) override;

 protected:
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled, const char* name);

 private:
  struct State {
    int64_t step = 0;
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
  };
  AdamOptions options_;
  bool decoupled_;
  const char* name_;
  std::vector<State> state_;
};

// Adam with decoupled weight decay (default 1e-2, like torch.optim.AdamW).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options = AdamOptions().weight_decay(1e-2));
};

}  // namespace tapegrad::optim
