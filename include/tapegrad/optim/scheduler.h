// Learning-rate schedulers, like torch.optim.lr_scheduler: each acts on every parameter group,
// counting from the group's initial_lr (set to the group's lr by the first scheduler made for the
// optimiser, so several schedulers of one optimiser share it). Making a scheduler takes its first
// step (to epoch 0); step() advances one epoch (or one batch, for OneCycleLR) and sets its lr.
//
//   optim::StepLR sched(opt, /*step_size=*/10, /*gamma=*/0.1);  ...  sched.step();
//
// Warm-up then cosine decay (5 warm-up epochs from lr/10, then 95 epochs of cosine):
//   auto warmup = std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, 5);
//   auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 95);
//   optim::SequentialLR sched(opt, {warmup, cosine}, {5});
//
// Note [chainable schedulers]: as in PyTorch, step() uses each scheduler's chainable form: the new
// lr is computed from the group's current lr (StepLR multiplies it by gamma at each step_size),
// so two schedulers stepped on one optimiser compose (ExponentialLR and MultiStepLR together
// multiply by both factors). set_epoch(e), PyTorch's step(epoch), uses the closed form of the
// epoch from the base lrs instead, which also ends any composition. LambdaLR and OneCycleLR have
// no chainable form: they set their lr outright at every step, as in PyTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/optim/optimizer.h"

namespace tapegrad::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch and sets every group's learning rate for it from the group's current lr
  // (the chainable form; see Note [chainable schedulers]).
  void step();
  // PyTorch's step(epoch): jumps to `epoch` and sets the learning rates of the closed form there,
  // from the base lrs (for resuming; it ignores what other schedulers did to the lr). Throws for
  // a negative epoch, one beyond the schedule's end (OneCycleLR), or an optimiser whose number of
  // groups changed since the scheduler was made; step() throws for the last two as well. Nothing
  // changes when either throws.
  void set_epoch(int64_t epoch);
  // The epoch of the last step: 0 after construction; -1 for a scheduler of a SequentialLR that
  // has not started yet.
  int64_t last_epoch() const { return epoch_; }
  double base_lr() const { return base_lrs_.front(); }  // the first group's
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The learning rates the last step (or the constructor) set, one per group.
  const std::vector<double>& get_last_lr() const { return last_lrs_; }
  // The learning rate group `group` has at `epoch` by the closed form (what set_epoch sets).
  virtual double lr_at(size_t group, int64_t epoch) const = 0;
  Optimizer& optimizer() const { return optimizer_; }
  const char* name() const { return name_; }

  // {"last_epoch", "base_lrs", "last_lr"} as float64 tensors (SequentialLR adds its schedulers'
  // states).
  virtual StateDict state_dict() const;
  // Restores a state_dict() and sets every group's lr to the saved "last_lr" (what this scheduler
  // had set). With several schedulers on one optimiser, load them in the order they step, so the
  // last one's lr is the one that stays (or load the optimiser's state after them). A state dict
  // without "last_lr" (saved before schedulers chained) gets the closed form of its epoch. Throws,
  // changing nothing, for a missing, unknown or invalid entry.
  virtual void load_state_dict(const StateDict& state);

 protected:
  LRScheduler(Optimizer& optimizer, const char* name);
  // Derived constructors call this last: PyTorch's initial step, from epoch -1 to 0 by the
  // chainable form (so a scheduler made after another one keeps the lr that one set).
  void initialize() { advance(0, /*closed_form=*/false); }
  void set_base_lrs(std::vector<double> base_lrs) { base_lrs_ = std::move(base_lrs); }
  // Throws for an epoch this schedule does not have (the default has all epochs >= 0).
  virtual void check_epoch(int64_t /*epoch*/) const {}
  // PyTorch's get_lr(): group `group`'s lr at last_epoch() from its current `lr`. The default is
  // lr_at (schedules that set their lr outright).
  virtual double chained_lr(size_t group, double /*lr*/) const { return lr_at(group, last_epoch()); }
  // Sets the optimiser's values for last_epoch(): the closed form (lr_at) or the chainable form
  // (chained_lr of each group's current lr).
  virtual void apply(bool closed_form);
  // Whether a computed lr may be negative (the default refuses it, as it refuses NaN and inf).
  virtual bool allows_negative_lr() const { return false; }
  size_t num_groups() const { return base_lrs_.size(); }

 private:
  friend class SequentialLR;
  // Moves to `epoch` and applies it; on an error, the epoch and the lrs stay as they were.
  void advance(int64_t epoch, bool closed_form);
  // PyTorch's SequentialLR "undoes" the initial step of the schedulers it is given.
  virtual void undo_initial_step() { --epoch_; }
  Optimizer& optimizer_;
  const char* name_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lrs_;
  int64_t epoch_ = -1;
};

// lr = base_lr * gamma^floor(epoch / step_size); chainable: lr * gamma at every multiple of step_size.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(size_t group, int64_t epoch) const override;

 protected:
  double chained_lr(size_t group, double lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma^(number of milestones <= epoch); a milestone listed twice counts twice.
// Chainable: lr * gamma^(times epoch is listed) at a milestone. Milestones may come in any order.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(size_t group, int64_t epoch) const override;

 protected:
  double chained_lr(size_t group, double lr) const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = base_lr * gamma^epoch; chainable: lr * gamma at every step.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  double lr_at(size_t group, int64_t epoch) const override;

 protected:
  double chained_lr(size_t group, double lr) const override;

 private:
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2 (the closed form);
// chainable: PyTorch's recurrence, which scales lr - eta_min by the ratio of successive cosines.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  double lr_at(size_t group, int64_t epoch) const override;

 protected:
  double chained_lr(size_t group, double lr) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// lr = base_lr * factor(epoch): one function for every group, or one per group.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);
  double lr_at(size_t group, int64_t epoch) const override;

 private:
  std::vector<Lambda> lambdas_;
};

// Warm-up: lr = base_lr * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) /
// total_iters), from start_factor * base_lr at epoch 0 to end_factor * base_lr from total_iters on.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(size_t group, int64_t epoch) const override;

 protected:
  double chained_lr(size_t group, double lr) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

struct OneCycleLROptions {
  OneCycleLROptions& pct_start(double v) {
    pct_start_ = v;
    return *this;
  }
  // "cos" or "linear"
  OneCycleLROptions& anneal_strategy(std::string v) {
    anneal_strategy_ = std::move(v);
    return *this;
  }
  OneCycleLROptions& cycle_momentum(bool v) {
    cycle_momentum_ = v;
    return *this;
  }
  OneCycleLROptions& base_momentum(double v) {
    base_momentum_ = v;
    return *this;
  }
  OneCycleLROptions& max_momentum(double v) {
    max_momentum_ = v;
    return *this;
  }
  OneCycleLROptions& div_factor(double v) {
    div_factor_ = v;
    return *this;
  }
  OneCycleLROptions& final_div_factor(double v) {
    final_div_factor_ = v;
    return *this;
  }
  OneCycleLROptions& three_phase(bool v) {
    three_phase_ = v;
    return *this;
  }
  double pct_start_ = 0.3;
  std::string anneal_strategy_ = "cos";
  bool cycle_momentum_ = true;
  double base_momentum_ = 0.85, max_momentum_ = 0.95;
  double div_factor_ = 25, final_div_factor_ = 1e4;
  bool three_phase_ = false;
};

// The 1cycle policy, stepped once per batch: lr rises from max_lr / div_factor to max_lr over the
// first pct_start of total_steps, then falls to max_lr / div_factor / final_div_factor (three_phase:
// back to the start first, then down). With cycle_momentum, SGD's momentum (Adam's beta1) moves the
// opposite way between max_momentum and base_momentum. For epochs * steps_per_epoch batches, pass
// that product as total_steps. Throws when cycling momentum on an SGD group without momentum
// (PyTorch would switch momentum on), and when stepped past total_steps. Steps 0 to total_steps
// are PyTorch's: its training loop's last scheduler step reaches total_steps, where the last phase
// is extrapolated one step (with linear annealing, to an lr below zero: it is not meant for
// another optimiser step, which would refuse it).
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, const OneCycleLROptions& options = {});
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
             const OneCycleLROptions& options = {});
  double lr_at(size_t group, int64_t epoch) const override;
  // The momentum (or beta1) group `group` has at `epoch`.
  double momentum_at(size_t group, int64_t epoch) const;
  // Also sets the momenta of the loaded epoch.
  void load_state_dict(const StateDict& state) override;

 protected:
  void check_epoch(int64_t epoch) const override;
  void apply(bool closed_form) override;
  // PyTorch extrapolates the last phase one step past its end (step total_steps), which with
  // linear annealing goes below min_lr, to a negative lr; it is set as PyTorch sets it.
  bool allows_negative_lr() const override { return true; }

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr;  // 0: initial, 1: max, 2: min
    bool momentum_down;    // max_momentum -> base_momentum (else up, or flat in phase 3)
    bool momentum_flat;
  };
  double anneal(double start, double end, double pct) const;
  // Sets every group's momentum (or beta1) for last_epoch(), when cycling momentum.
  void set_momenta();
  // The phase of `step` and how far through it (0 to 1).
  std::pair<const Phase*, double> locate(int64_t step) const;

  int64_t total_steps_;
  OneCycleLROptions options_;
  bool use_beta1_ = false;
  std::vector<double> initial_lrs_, max_lrs_, min_lrs_;
  std::vector<Phase> phases_;
};

// Runs `schedulers` one after another: schedulers[i] takes over at epoch milestones[i - 1] and
// counts its own epochs from 0 there (milestones: one fewer than schedulers, increasing, > 0).
// All must act on `optimizer`. As PyTorch's: making it resets the lrs to initial_lr and redoes the
// first scheduler's first step; at a milestone the next scheduler starts from its closed form at
// epoch 0 (set_epoch(0)), and otherwise the running one steps (chainable form).
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double lr_at(size_t group, int64_t epoch) const override;
  // Adds "schedulers.<i>.<key>" for each scheduler's state.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 protected:
  void check_epoch(int64_t epoch) const override;
  void apply(bool closed_form) override;

 private:
  // The scheduler that runs `epoch` and the epoch it counts.
  std::pair<size_t, int64_t> locate(int64_t epoch) const;
  void undo_initial_step() override;
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

struct ReduceLROnPlateauOptions {
  ReduceLROnPlateauOptions& mode(std::string v) {
    mode_ = std::move(v);
    return *this;
  }  // "min" or "max"
  ReduceLROnPlateauOptions& factor(double v) {
    factor_ = v;
    return *this;
  }
  ReduceLROnPlateauOptions& patience(int64_t v) {
    patience_ = v;
    return *this;
  }
  ReduceLROnPlateauOptions& threshold(double v) {
    threshold_ = v;
    return *this;
  }
  // "rel" or "abs"
  ReduceLROnPlateauOptions& threshold_mode(std::string v) {
    threshold_mode_ = std::move(v);
    return *this;
  }
  ReduceLROnPlateauOptions& cooldown(int64_t v) {
    cooldown_ = v;
    return *this;
  }
  ReduceLROnPlateauOptions& min_lr(double v) {
    min_lrs_ = {v};
    return *this;
  }
  ReduceLROnPlateauOptions& min_lr(std::vector<double> v) {
    min_lrs_ = std::move(v);
    return *this;
  }  // one per group
  ReduceLROnPlateauOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  std::string mode_ = "min";
  double factor_ = 0.1;
  int64_t patience_ = 10;
  double threshold_ = 1e-4;
  std::string threshold_mode_ = "rel";
  int64_t cooldown_ = 0;
  std::vector<double> min_lrs_{0.0};
  double eps_ = 1e-8;
};

// Multiplies every group's lr by `factor` (not below its min_lr) once the metric passed to step()
// has not improved for more than `patience` epochs, then waits `cooldown` epochs before counting
// again. Improvement (mode min, rel): metric < best * (1 - threshold); (abs): metric < best -
// threshold; mode max mirrors it. A change smaller than eps is not made. torch's
// ReduceLROnPlateau.
class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options = {});
  void step(double metric);
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }
  const std::vector<double>& get_last_lr() const { return last_lrs_; }
  // {"last_epoch", "best", "num_bad_epochs", "cooldown_counter"} as float64 tensors. The lrs
  // themselves are in the optimiser's state dict.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  bool is_better(double metric) const;
  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;
  std::vector<double> last_lrs_;
  double best_;
  int64_t last_epoch_ = 0, num_bad_epochs_ = 0, cooldown_counter_ = 0;
};

}  // namespace tapegrad::optim
