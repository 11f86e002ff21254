// Optimisers: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW, with PyTorch's
// exact update rules and defaults. In a CUDA graph capture (tapegrad/cuda/graph.h), Adam needs
// AdamOptions::capturable(true), and both need a warm-up step first (state created by a step cannot
// be captured: a replay would create it again); step() throws a clear Error otherwise. A step updates the parameters
// that share a device, a dtype, a step count and the same hyperparameters together, in one multi-tensor pass where the
// backend has one (one or a few kernel launches for a whole model on a GPU), else in one fused pass per parameter.
// foreach(false) forces the per-parameter passes; on the CPU both give bit-identical results.
//
//   optim::Adam opt(model.parameters(), optim::AdamOptions().lr(1e-3));
//   loss.backward(); opt.step(); opt.zero_grad();
//
// Parameter groups, like torch.optim: each group has its own options; an option a group does not
// set takes the optimiser's default (the Options struct):
//
//   optim::SGD opt({optim::ParamGroup(body.parameters()),
//                   optim::ParamGroup(head.parameters()).lr(1e-3).momentum(0.5)},
//                  optim::SGDOptions(1e-2).momentum(0.9));
//   for (optim::ParamGroup& g : opt.param_groups()) g.lr(g.lr() * 0.5);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad {

using StateDict = std::vector<std::pair<std::string, Tensor>>;

namespace optim {

// One parameter group: its parameters and the options it overrides. Setters return *this for
// chaining; getters throw tapegrad::Error when the option is unset (an SGD group has no betas).
// Once a group is in an optimiser, every option that optimiser uses is set (the unset ones from its
// defaults). Values are checked when the group is added and again at every step.
class ParamGroup {
 public:
  ParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}  // NOLINT: implicit on purpose

  const std::vector<Tensor>& params() const { return params_; }

  ParamGroup& lr(double v) { return set("lr", v); }
  ParamGroup& weight_decay(double v) { return set("weight_decay", v); }
  ParamGroup& momentum(double v) { return set("momentum", v); }            // SGD
  ParamGroup& dampening(double v) { return set("dampening", v); }          // SGD
  ParamGroup& nesterov(bool v) { return set("nesterov", v ? 1.0 : 0.0); }  // SGD
  ParamGroup& betas(double beta1, double beta2) {
    set("beta1", beta1);
    return set("beta2", beta2);
  }                                                                      // Adam
  ParamGroup& eps(double v) { return set("eps", v); }                    // Adam
  ParamGroup& amsgrad(bool v) { return set("amsgrad", v ? 1.0 : 0.0); }  // Adam
  // The lr a scheduler counts from (PyTorch's group["initial_lr"]); set by the first scheduler made
  // for the optimiser, unset before.
  ParamGroup& initial_lr(double v) { return set("initial_lr", v); }

  double lr() const { return get("lr"); }
  double weight_decay() const { return get("weight_decay"); }
  double momentum() const { return get("momentum"); }
  double dampening() const { return get("dampening"); }
  bool nesterov() const { return get("nesterov") != 0.0; }
  std::pair<double, double> betas() const { return {get("beta1"), get("beta2")}; }
  double eps() const { return get("eps"); }
  bool amsgrad() const { return get("amsgrad") != 0.0; }
  double initial_lr() const { return get("initial_lr"); }

  // Generic access by name ("lr", "momentum", "beta1", "nesterov" as 0/1, ...), for schedulers and
  // state dicts. An unknown name is an error.
  bool has(const std::string& option) const;
  double get(const std::string& option) const;
  ParamGroup& set(const std::string& option, double value);
  void unset(const std::string& option);

  // Every option name a group can hold, in a fixed order.
  static const std::vector<std::string>& option_names();

 private:
  std::optional<double>& slot(const std::string& option);
  const std::optional<double>& slot(const std::string& option) const;

  std::vector<Tensor> params_;
  std::optional<double> options_[10];
};

// A fixed-size view of an optimiser's groups: options can be read and changed in place (a scheduler
// sets each group's lr), groups are added only through Optimizer::add_param_group.
template <class Group>
class ParamGroupSpan {
 public:
  ParamGroupSpan(Group* data, size_t size) : data_(data), size_(size) {}
  size_t size() const { return size_; }
  Group* begin() const { return data_; }
  Group* end() const { return data_ + size_; }
  Group& operator[](size_t i) const;  // throws tapegrad::Error out of range

 private:
  Group* data_;
  size_t size_;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter that has a gradient (runs without recording). Throws,
  // before any parameter moves, when a group holds an invalid option.
  virtual void step() = 0;
  // Clears gradients: to undefined (default, like PyTorch 2) or to zeros in place.
  void zero_grad(bool set_to_none = true);

  // The first group's learning rate (the only group of an optimiser made from one list).
  double lr() const;
  // Sets every group's learning rate.
  void set_lr(double lr);

  // Every group's parameters, in group order: index i here is "i." in the state dict.
  const std::vector<Tensor>& params() const { return params_; }
  ParamGroupSpan<ParamGroup> param_groups() { return {groups_.data(), groups_.size()}; }
  ParamGroupSpan<const ParamGroup> param_groups() const { return {groups_.data(), groups_.size()}; }
  // Adds a group (options it leaves unset take the optimiser's defaults). Throws for an undefined
  // parameter, one that is not a leaf requiring grad, one listed twice, one already in another
  // group, or an option this optimiser does not have or an invalid value.
  void add_param_group(ParamGroup group);
  const char* name() const { return name_; }

  // The optimiser's state as named tensors, for checkpoints: per-parameter state ("0.exp_avg",
  // "0.step", ...) then each group's layout and options ("param_groups.0.params", the
  // group's parameter indices, "param_groups.0.lr", "param_groups.0.beta1", ..., all float64,
  // booleans as 0/1).
  StateDict state_dict() const;
  // Loads a state dict made by state_dict(): throws, changing nothing, when its group layout
  // differs from this optimiser's or an entry is missing, unknown or invalid. A state dict without
  // "param_groups." entries (written before groups existed) keeps the current groups' options.
  void load_state_dict(const StateDict& state);

 protected:
  explicit Optimizer(const char* name) : name_(name) {}
  // For derived constructors: one group per entry; throws for an empty list, as PyTorch does.
  void init_groups(std::vector<ParamGroup> groups);

  // The options this optimiser's groups hold, besides "initial_lr".
  virtual const std::vector<std::string>& group_options() const = 0;
  // Fills the group's unset options from the defaults.
  virtual void fill_defaults(ParamGroup& group) const = 0;
  // Throws tapegrad::Error, naming `where`, for an invalid option value.
  virtual void check_group(const ParamGroup& group, const std::string& where) const = 0;
  // The per-parameter part of state_dict/load_state_dict; the loader gets the groups the state
  // dict brings (or the current ones) and must change nothing when it throws.
  virtual StateDict param_state_dict() const = 0;
  virtual void load_param_state(const StateDict& entries, const std::vector<ParamGroup>& groups) = 0;

  // Checks every group (at the start of a step).
  void check_groups() const;
  // state_dict()'s "param_groups." entries alone.
  StateDict group_state_dict() const;

  std::vector<ParamGroup> groups_;
  std::vector<Tensor> params_;  // every group's parameters, in order

 private:
  std::vector<ParamGroup> load_groups(const StateDict& entries) const;
  const char* name_;
};

struct SGDOptions {
  SGDOptions(double lr = 0.01) : lr_(lr) {}
  SGDOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  SGDOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  SGDOptions& dampening(double v) {
    dampening_ = v;
    return *this;
  }
  SGDOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  SGDOptions& nesterov(bool v) {
    nesterov_ = v;
    return *this;
  }
  SGDOptions& foreach (bool v) {
    foreach_ = v;
    return *this;
  }  // multi-tensor updates where available
  double lr_, momentum_ = 0, dampening_ = 0, weight_decay_ = 0;
  bool nesterov_ = false;
  bool foreach_ = true;
};

class SGD : public Optimizer {
 public:
  // Throws for an empty parameter list, a negative or NaN lr/momentum/weight decay, or nesterov
  // without momentum (or with dampening).
  SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults = {});
  void step() override;
  const SGDOptions& defaults() const { return options_; }

 protected:
  const std::vector<std::string>& group_options() const override;
  void fill_defaults(ParamGroup& group) const override;
  void check_group(const ParamGroup& group, const std::string& where) const override;
  StateDict param_state_dict() const override;
  void load_param_state(const StateDict& entries, const std::vector<ParamGroup>& groups) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;  // undefined until a parameter's first step with momentum
};

struct AdamOptions {
  AdamOptions(double lr = 1e-3) : lr_(lr) {}
  AdamOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  AdamOptions& betas(double b1, double b2) {
    beta1_ = b1;
    beta2_ = b2;
    return *this;
  }
  AdamOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  AdamOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  AdamOptions& amsgrad(bool v) {
    amsgrad_ = v;
    return *this;
  }
  AdamOptions& foreach (bool v) {
    foreach_ = v;
    return *this;
  }  // multi-tensor updates where available
  // PyTorch's capturable=True: each parameter's step count lives in a float32 tensor on its device,
  // incremented by the update itself, and the bias corrections are computed there, so a step
  // captured in a cuda::Graph is right on every replay. The results equal the plain Adam's. The
  // learning rate stays a host value: fixed in a captured step (docs/cuda_graphs.md).
  AdamOptions& capturable(bool v) {
    capturable_ = v;
    return *this;
  }
  double lr_, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
  bool amsgrad_ = false;
  bool foreach_ = true;
  bool capturable_ = false;
};

class Adam : public Optimizer {
 public:
  // Throws for an empty parameter list, betas outside [0, 1), a negative or NaN lr, eps or weight
  // decay.
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults = {});
  void step() override;
  const AdamOptions& defaults() const { return options_; }

 protected:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled, const char* name);
  const std::vector<std::string>& group_options() const override;
  void fill_defaults(ParamGroup& group) const override;
  void check_group(const ParamGroup& group, const std::string& where) const override;
  StateDict param_state_dict() const override;
  void load_param_state(const StateDict& entries, const std::vector<ParamGroup>& groups) override;

 private:
  struct State {
    int64_t step = 0;  // counted on the host too (behind the device's after graph replays)
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
    Tensor step_count;  // capturable: float32 [] on the parameter's device, the true count
  };
  AdamOptions options_;
  bool decoupled_;
  std::vector<State> state_;
};

// Adam with decoupled weight decay (default 1e-2, like torch.optim.AdamW).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options = AdamOptions().weight_decay(1e-2));
  AdamW(std::vector<ParamGroup> groups, AdamOptions defaults = AdamOptions().weight_decay(1e-2));
};

}  // namespace optim
}  // namespace tapegrad
