// The scheduler base and the closed-form schedules: StepLR, MultiStepLR, ExponentialLR,
// CosineAnnealingLR, LambdaLR, LinearLR.
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
  set_epoch(epoch_ + 1);
}

void LRScheduler::set_epoch(int64_t epoch) {
  TG_CHECK(epoch >= 0, name_, ": epoch must be >= 0, got ", epoch);
  TG_CHECK(optimizer_.param_groups().size() == base_lrs_.size(), name_, ": the optimiser has ",
           optimizer_.param_groups().size(), " parameter groups, the scheduler was made for ", base_lrs_.size());
  check_epoch(epoch);
  apply(epoch);
  epoch_ = epoch;
}

void LRScheduler::apply(int64_t epoch) {
  std::vector<double> lrs(base_lrs_.size());
  for (size_t g = 0; g < lrs.size(); ++g) {
    lrs[g] = lr_at(g, epoch);
    TG_CHECK(std::isfinite(lrs[g]) && lrs[g] >= 0, name_, ": epoch ", epoch, " gives parameter group ", g,
             " the invalid learning rate ", lrs[g]);
  }
  auto groups = optimizer_.param_groups();
  for (size_t g = 0; g < lrs.size(); ++g) groups[g].lr(lrs[g]);
  last_lrs_ = std::move(lrs);
}

StateDict LRScheduler::state_dict() const {
  return {{"last_epoch", number_tensor(static_cast<double>(epoch_))}, {"base_lrs", numbers_tensor(base_lrs_)}};
}

void LRScheduler::load_state_dict(const StateDict& state) {
  auto entries = scheduler_entries(state, {"last_epoch", "base_lrs"}, name_);
  const int64_t epoch = read_count(entries, "last_epoch", name_);
  std::vector<double> base = read_numbers(entries, "base_lrs", static_cast<int64_t>(base_lrs_.size()), name_);
  for (double lr : base) TG_CHECK(std::isfinite(lr) && lr >= 0, name_, ".load_state_dict: invalid base lr ", lr);
  std::vector<double> old = base_lrs_;
  base_lrs_ = base;
  try {
    set_epoch(epoch);
  } catch (...) {
    base_lrs_ = old;
    throw;
  }
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

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer, "ExponentialLR"), gamma_(gamma) {
  TG_CHECK(gamma > 0 && std::isfinite(gamma), "ExponentialLR: invalid gamma ", gamma);
  initialize();
}

double ExponentialLR::lr_at(size_t group, int64_t epoch) const {
  return base_lrs()[group] * std::pow(gamma_, static_cast<double>(epoch));
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

}  // namespace tapegrad::optim
