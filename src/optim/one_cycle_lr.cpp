// OneCycleLR: torch.optim.lr_scheduler.OneCycleLR's phases, annealing and momentum cycling.
#include <cmath>

#include "tapegrad/optim/scheduler.h"

namespace tapegrad::optim {

namespace {

constexpr int kInitial = 0, kMax = 1, kMin = 2;

std::vector<double> repeat(double v, size_t n) {
  return std::vector<double>(n, v);
}

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, const OneCycleLROptions& options)
    : OneCycleLR(optimizer, repeat(max_lr, optimizer.param_groups().size()), total_steps, options) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
                       const OneCycleLROptions& options)
    : LRScheduler(optimizer, "OneCycleLR"), total_steps_(total_steps), options_(options), max_lrs_(std::move(max_lrs)) {
  const OneCycleLROptions& o = options_;
  TG_CHECK(total_steps > 0, "OneCycleLR: total_steps must be positive, got ", total_steps);
  TG_CHECK(o.pct_start_ >= 0 && o.pct_start_ <= 1, "OneCycleLR: pct_start must be in [0, 1], got ", o.pct_start_);
  TG_CHECK(o.anneal_strategy_ == "cos" || o.anneal_strategy_ == "linear",
           "OneCycleLR: anneal_strategy must be 'cos' or 'linear', got '", o.anneal_strategy_, "'");
  TG_CHECK(std::isfinite(o.div_factor_) && o.div_factor_ > 0, "OneCycleLR: invalid div_factor ", o.div_factor_);
  TG_CHECK(std::isfinite(o.final_div_factor_) && o.final_div_factor_ > 0, "OneCycleLR: invalid final_div_factor ",
           o.final_div_factor_);
  TG_CHECK(max_lrs_.size() == num_groups(), "OneCycleLR: expected ", num_groups(),
           " max_lr values (one per parameter group), got ", max_lrs_.size());
  for (double lr : max_lrs_) TG_CHECK(std::isfinite(lr) && lr >= 0, "OneCycleLR: invalid max_lr ", lr);

  auto groups = optimizer.param_groups();
  if (o.cycle_momentum_) {
    TG_CHECK(std::isfinite(o.base_momentum_) && std::isfinite(o.max_momentum_) && o.base_momentum_ >= 0 &&
                 o.max_momentum_ >= 0,
             "OneCycleLR: invalid base_momentum ", o.base_momentum_, " or max_momentum ", o.max_momentum_);
    use_beta1_ = groups[0].has("beta1");
    for (size_t g = 0; g < groups.size(); ++g) {
      TG_CHECK(groups[g].has("beta1") || groups[g].has("momentum"), "OneCycleLR: ", optimizer.name(),
               " has neither momentum nor betas, so cycle_momentum must be false");
      // As in PyTorch, an SGD group with momentum 0 gets max_momentum at once: cycling switches
      // momentum on (SGD makes its momentum buffer at the first step with momentum).
    }
  }
  // PyTorch overwrites initial_lr here (it does not keep an earlier scheduler's).
  std::vector<double> initial(num_groups());
  for (size_t g = 0; g < initial.size(); ++g) {
    initial[g] = max_lrs_[g] / o.div_factor_;
    groups[g].initial_lr(initial[g]);
    initial_lrs_.push_back(initial[g]);
    min_lrs_.push_back(initial[g] / o.final_div_factor_);
  }
  set_base_lrs(initial);

  const double total = static_cast<double>(total_steps);
  if (o.three_phase_) {
    phases_ = {{o.pct_start_ * total - 1, kInitial, kMax, true, false},
               {2 * o.pct_start_ * total - 2, kMax, kInitial, false, false},
               {total - 1, kInitial, kMin, false, true}};
  } else {
    phases_ = {{o.pct_start_ * total - 1, kInitial, kMax, true, false}, {total - 1, kMax, kMin, false, false}};
  }
  initialize();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy_ == "linear") return (end - start) * pct + start;
  const double pi = 3.14159265358979323846;
  return end + (start - end) / 2.0 * (std::cos(pi * pct) + 1);
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::locate(int64_t step) const {
  const double s = static_cast<double>(step);
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (s <= phase.end_step || i + 1 == phases_.size()) {
      // A phase of no length (pct_start 0 or 1) is over as soon as it starts; PyTorch divides by zero.
      const double pct = phase.end_step > start ? (s - start) / (phase.end_step - start) : 1.0;
      return {&phase, pct};
    }
    start = phase.end_step;
  }
  return {&phases_.back(), 1.0};  // not reached
}

double OneCycleLR::lr_at(size_t group, int64_t epoch) const {
  const auto [phase, pct] = locate(epoch);
  const double* lrs[] = {&initial_lrs_[group], &max_lrs_[group], &min_lrs_[group]};
  return anneal(*lrs[phase->start_lr], *lrs[phase->end_lr], pct);
}

double OneCycleLR::momentum_at(size_t /*group*/, int64_t epoch) const {
  const auto [phase, pct] = locate(epoch);
  const double lo = options_.base_momentum_, hi = options_.max_momentum_;
  if (phase->momentum_flat) return anneal(hi, hi, pct);
  return phase->momentum_down ? anneal(hi, lo, pct) : anneal(lo, hi, pct);
}

void OneCycleLR::check_epoch(int64_t epoch) const {
  // PyTorch allows one step past the last (extrapolating the final phase) and refuses the next.
  TG_CHECK(epoch <= total_steps_, "OneCycleLR: tried to step ", epoch, " times; total_steps is ", total_steps_);
}

void OneCycleLR::apply(bool closed_form) {
  LRScheduler::apply(closed_form);
  set_momenta();
}

void OneCycleLR::set_momenta() {
  if (!options_.cycle_momentum_) return;
  auto groups = optimizer().param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const double m = momentum_at(g, last_epoch());
    if (use_beta1_)
      groups[g].betas(m, groups[g].betas().second);
    else
      groups[g].momentum(m);
  }
}

void OneCycleLR::load_state_dict(const StateDict& state) {
  LRScheduler::load_state_dict(state);
  set_momenta();
}

}  // namespace tapegrad::optim
