// The scheduler base and the epoch schedules, each in PyTorch's two forms (chainable and closed):
// StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LambdaLR, LinearLR.
#include "tapegrad/optim/scheduler.h"

#include <algorithm>
#include <cmath>

#include "optim/scheduler_state.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad::optim {

std::map<std::string, Tensor> scheduler_entries(const StateDict& state, const std::vector<std::string>& known,
                                                const char* scheduler) {
  std::map<std::string, Tensor> entries;
  for (const auto& [key, t] : state) {
    TG_CHECK(t.defined(), scheduler, ".load_state_dict: '", key, "' is undefined");
    TG_CHECK(std::find(known.begin(), known.end(), key) != known.end(), scheduler, ".load_state_dict: unexpected key '",
             key, "'");
    TG_CHECK(entries.emplace(key, t).second, scheduler, ".load_state_dict: '", key, "' appears twice");
  }
  return entries;
}

std::vector<double> read_numbers(const std::map<std::string, Tensor>& entries, const std::string& key, int64_t count,
                                 const char* scheduler) {
  auto it = entries.find(key);
  TG_CHECK(it != entries.end(), scheduler, ".load_state_dict: '", key, "' is missing");
  const Tensor& t = it->second;
  TG_CHECK(t.dim() <= 1 && (count < 0 || t.numel() == count), scheduler, ".load_state_dict: '", key, "' should hold ",
           count, " number(s), got shape ", shape_str(t.sizes()));
  return t.to(kCPU, kFloat64).reshape({t.numel()}).tolist<double>();
}

int64_t read_count(const std::map<std::string, Tensor>& entries, const std::string& key, const char* scheduler) {
  const double v = read_numbers(entries, key, 1, scheduler)[0];
  // 2^53: every whole number up to it is exact in float64.
  TG_CHECK(std::isfinite(v) && v >= 0 && v <= 9007199254740992.0 && v == std::floor(v), scheduler,
           ".load_state_dict: '", key, "' holds ", v, ", not a whole number >= 0");
  return static_cast<int64_t>(v);
}

Tensor number_tensor(double value) {
  return full({}, value, kFloat64);
}
Tensor numbers_tensor(const std::vector<double>& values) {
  return tensor<double>(values, {static_cast<int64_t>(values.size())});
}

LRScheduler::LRScheduler(Optimizer& optimizer, const char* name) : optimizer_(optimizer), name_(name) {
  // PyTorch's group.setdefault("initial_lr", group["lr"]): the first scheduler fixes the lr every
  // later one (and a resumed one) counts from.
  for (ParamGroup& g : optimizer.param_groups()) {
    if (!g.has("initial_lr")) g.initial_lr(g.lr());
    base_lrs_.push_back(g.initial_lr());
  }
}

void LRScheduler::step() {
  advance(epoch_ + 1, /*closed_form=*/false);
}

void LRScheduler::set_epoch(int64_t epoch) {
  TG_CHECK(epoch >= 0, name_, ": epoch must be >= 0, got ", epoch);
  advance(epoch, /*closed_form=*/true);
}

void LRScheduler::advance(int64_t epoch, bool closed_form) {
  TG_CHECK(optimizer_.param_groups().size() == base_lrs_.size(), name_, ": the optimiser has ",
           optimizer_.param_groups().size(), " parameter groups, the scheduler was made for ", base_lrs_.size());
  check_epoch(epoch);
  // The forms read last_epoch(), so it moves first, and back if apply refuses the values.
  const int64_t before = epoch_;
  epoch_ = epoch;
  try {
    apply(closed_form);
  } catch (...) {
    epoch_ = before;
    throw;
  }
}

void LRScheduler::apply(bool closed_form) {
  auto groups = optimizer_.param_groups();
  std::vector<double> lrs(base_lrs_.size());
  for (size_t g = 0; g < lrs.size(); ++g) {
    lrs[g] = closed_form ? lr_at(g, epoch_) : chained_lr(g, groups[g].lr());
    TG_CHECK(std::isfinite(lrs[g]) && (lrs[g] >= 0 || allows_negative_lr()), name_, ": epoch ", epoch_,
             " gives parameter group ", g, " the invalid learning rate ", lrs[g]);
  }
  for (size_t g = 0; g < lrs.size(); ++g) groups[g].lr(lrs[g]);
  last_lrs_ = std::move(lrs);
}

StateDict LRScheduler::state_dict() const {
  return {{"last_epoch", number_tensor(static_cast<double>(epoch_))},
          {"base_lrs", numbers_tensor(base_lrs_)},
          {"last_lr", numbers_tensor(last_lrs_)}};
}

void LRScheduler::load_state_dict(const StateDict& state) {
  auto entries = scheduler_entries(state, {"last_epoch", "base_lrs", "last_lr"}, name_);
  // -1: a scheduler of a SequentialLR that has not started yet.
  const double saved_epoch = read_numbers(entries, "last_epoch", 1, name_)[0];
  TG_CHECK(saved_epoch >= -1 && saved_epoch <= 9007199254740992.0 && saved_epoch == std::floor(saved_epoch), name_,
           ".load_state_dict: 'last_epoch' holds ", saved_epoch, ", not a whole number >= -1");
  const int64_t epoch = static_cast<int64_t>(saved_epoch);
  const int64_t groups = static_cast<int64_t>(base_lrs_.size());
  std::vector<double> base = read_numbers(entries, "base_lrs", groups, name_);
  for (double lr : base) TG_CHECK(std::isfinite(lr) && lr >= 0, name_, ".load_state_dict: invalid base lr ", lr);
  TG_CHECK(optimizer_.param_groups().size() == base_lrs_.size(), name_, ".load_state_dict: the optimiser has ",
           optimizer_.param_groups().size(), " parameter groups, the scheduler was made for ", base_lrs_.size());
  if (!entries.count("last_lr")) {
    // Saved before schedulers chained: the closed form of the epoch, as then.
    std::vector<double> old = base_lrs_;
    base_lrs_ = base;
    try {
      set_epoch(epoch);
    } catch (...) {
      base_lrs_ = old;
      throw;
    }
    return;
  }
  std::vector<double> last = read_numbers(entries, "last_lr", groups, name_);
  for (double lr : last)
    TG_CHECK(std::isfinite(lr) && (lr >= 0 || allows_negative_lr()), name_, ".load_state_dict: invalid last_lr ", lr);
  check_epoch(epoch);
  base_lrs_ = base;
  epoch_ = epoch;
  auto param_groups = optimizer_.param_groups();
  for (size_t g = 0; g < last.size(); ++g) param_groups[g].lr(last[g]);
  last_lrs_ = std::move(last);
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  TG_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  TG_CHECK(gamma > 0 && std::isfinite(gamma), "StepLR: invalid gamma ", gamma);
  initialize();
}

double StepLR::lr_at(size_t group, int64_t epoch) const {
  return base_lrs()[group] * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

double StepLR::chained_lr(size_t /*group*/, double lr) const {
  return last_epoch() == 0 || last_epoch() % step_size_ != 0 ? lr : lr * gamma_;
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer, "MultiStepLR"), milestones_(std::move(milestones)), gamma_(gamma) {
  for (int64_t m : milestones_) TG_CHECK(m >= 0, "MultiStepLR: milestone ", m, " is negative");
  TG_CHECK(gamma > 0 && std::isfinite(gamma), "MultiStepLR: invalid gamma ", gamma);
  std::sort(milestones_.begin(), milestones_.end());
  initialize();
}

double MultiStepLR::lr_at(size_t group, int64_t epoch) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lrs()[group] * std::pow(gamma_, static_cast<double>(passed));
}

double MultiStepLR::chained_lr(size_t /*group*/, double lr) const {
  const auto [first, last] = std::equal_range(milestones_.begin(), milestones_.end(), last_epoch());
  return first == last ? lr : lr * std::pow(gamma_, static_cast<double>(last - first));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer, "ExponentialLR"), gamma_(gamma) {
  TG_CHECK(gamma > 0 && std::isfinite(gamma), "ExponentialLR: invalid gamma ", gamma);
  initialize();
}

double ExponentialLR::lr_at(size_t group, int64_t epoch) const {
  return base_lrs()[group] * std::pow(gamma_, static_cast<double>(epoch));
}

double ExponentialLR::chained_lr(size_t /*group*/, double lr) const {
  return last_epoch() == 0 ? lr : lr * gamma_;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingLR"), t_max_(t_max), eta_min_(eta_min) {
  TG_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", t_max);
  TG_CHECK(eta_min >= 0 && std::isfinite(eta_min), "CosineAnnealingLR: invalid eta_min ", eta_min);
  initialize();
}

double CosineAnnealingLR::lr_at(size_t group, int64_t epoch) const {
  const double pi = 3.14159265358979323846;
  return eta_min_ + (base_lrs()[group] - eta_min_) *
                        (1 + std::cos(pi * static_cast<double>(epoch) / static_cast<double>(t_max_))) / 2;
}

double CosineAnnealingLR::chained_lr(size_t group, double lr) const {
  // PyTorch's get_lr. Where the previous cosine is -1 (epoch - 1 an odd multiple of t_max) the
  // ratio below would divide by zero, so that step adds the rise of the first step instead.
  const double pi = 3.14159265358979323846;
  const int64_t e = last_epoch();
  const double t = static_cast<double>(t_max_);
  if (e == 0) return lr;
  if ((e - 1 - t_max_) % (2 * t_max_) == 0) return lr + (base_lrs()[group] - eta_min_) * (1 - std::cos(pi / t)) / 2;
  return (1 + std::cos(pi * static_cast<double>(e) / t)) / (1 + std::cos(pi * static_cast<double>(e - 1) / t)) *
             (lr - eta_min_) +
         eta_min_;
}

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.param_groups().size(), lr_lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer, "LambdaLR"), lambdas_(std::move(lr_lambdas)) {
  TG_CHECK(lambdas_.size() == num_groups(), "LambdaLR: expected ", num_groups(),
           " lr_lambdas (one per parameter group), got ", lambdas_.size());
  for (size_t g = 0; g < lambdas_.size(); ++g)
    TG_CHECK(static_cast<bool>(lambdas_[g]), "LambdaLR: lr_lambda ", g, " is empty");
  initialize();
}

double LambdaLR::lr_at(size_t group, int64_t epoch) const {
  return base_lrs()[group] * lambdas_[group](epoch);
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer, "LinearLR"),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  // PyTorch's bounds: a start factor of 0 would make its recurrence divide by zero.
  TG_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  TG_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  TG_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got ", total_iters);
  initialize();
}

double LinearLR::lr_at(size_t group, int64_t epoch) const {
  const double t = static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base_lrs()[group] * (start_factor_ + (end_factor_ - start_factor_) * t);
}

double LinearLR::chained_lr(size_t /*group*/, double lr) const {
  const int64_t e = last_epoch();
  if (e == 0) return lr * start_factor_;
  if (e > total_iters_) return lr;
  const double delta = end_factor_ - start_factor_;
  return lr * (1.0 + delta / (static_cast<double>(total_iters_) * start_factor_ + static_cast<double>(e - 1) * delta));
}

}  // namespace tapegrad::optim
