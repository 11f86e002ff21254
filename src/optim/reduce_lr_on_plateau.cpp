// ReduceLROnPlateau: torch.optim.lr_scheduler.ReduceLROnPlateau's recurrence on a metric.
#include <algorithm>
#include <cmath>
#include <limits>

#include "optim/scheduler_state.h"
#include "tapegrad/optim/scheduler.h"

namespace tapegrad::optim {

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options)
    : optimizer_(optimizer), options_(options) {
  const ReduceLROnPlateauOptions& o = options_;
  TG_CHECK(o.mode_ == "min" || o.mode_ == "max", "ReduceLROnPlateau: mode must be 'min' or 'max', got '", o.mode_, "'");
  TG_CHECK(o.threshold_mode_ == "rel" || o.threshold_mode_ == "abs",
           "ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got '", o.threshold_mode_, "'");
  TG_CHECK(o.factor_ >= 0 && o.factor_ < 1, "ReduceLROnPlateau: factor must be in [0, 1), got ", o.factor_);
  TG_CHECK(o.patience_ >= 0, "ReduceLROnPlateau: patience must be >= 0, got ", o.patience_);
  TG_CHECK(o.cooldown_ >= 0, "ReduceLROnPlateau: cooldown must be >= 0, got ", o.cooldown_);
  TG_CHECK(std::isfinite(o.threshold_) && o.threshold_ >= 0, "ReduceLROnPlateau: invalid threshold ", o.threshold_);
  TG_CHECK(std::isfinite(o.eps_) && o.eps_ >= 0, "ReduceLROnPlateau: invalid eps ", o.eps_);
  const size_t n = optimizer.param_groups().size();
  min_lrs_ = o.min_lrs_.size() == 1 ? std::vector<double>(n, o.min_lrs_[0]) : o.min_lrs_;
  TG_CHECK(min_lrs_.size() == n, "ReduceLROnPlateau: expected ", n, " min_lr values (one per parameter group), got ",
           o.min_lrs_.size());
  for (double m : min_lrs_) TG_CHECK(std::isfinite(m) && m >= 0, "ReduceLROnPlateau: invalid min_lr ", m);
  // The worst value of the mode: any first metric improves on it.
  best_ = o.mode_ == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  for (const ParamGroup& g : optimizer.param_groups()) last_lrs_.push_back(g.lr());
}

bool ReduceLROnPlateau::is_better(double a) const {
  const double t = options_.threshold_;
  const bool rel = options_.threshold_mode_ == "rel";
  if (options_.mode_ == "min") return rel ? a < best_ * (1 - t) : a < best_ - t;
  return rel ? a > best_ * (t + 1) : a > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  auto groups = optimizer_.param_groups();
  TG_CHECK(groups.size() == min_lrs_.size(), "ReduceLROnPlateau: the optimiser has ", groups.size(),
           " parameter groups, the scheduler was made for ", min_lrs_.size());
  ++last_epoch_;
  // A NaN metric is never better, so it counts as a bad epoch (as in PyTorch).
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience_) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const double old_lr = groups[g].lr();
      const double new_lr = std::max(old_lr * options_.factor_, min_lrs_[g]);
      if (old_lr - new_lr > options_.eps_) groups[g].lr(new_lr);
    }
    cooldown_counter_ = options_.cooldown_;
    num_bad_epochs_ = 0;
  }
  last_lrs_.clear();
  for (const ParamGroup& g : groups) last_lrs_.push_back(g.lr());
}

StateDict ReduceLROnPlateau::state_dict() const {
  return {{"last_epoch", number_tensor(static_cast<double>(last_epoch_))},
          {"best", number_tensor(best_)},
          {"num_bad_epochs", number_tensor(static_cast<double>(num_bad_epochs_))},
          {"cooldown_counter", number_tensor(static_cast<double>(cooldown_counter_))}};
}

void ReduceLROnPlateau::load_state_dict(const StateDict& state) {
  const char* name = "ReduceLROnPlateau";
  auto entries = scheduler_entries(state, {"last_epoch", "best", "num_bad_epochs", "cooldown_counter"}, name);
  const int64_t epoch = read_count(entries, "last_epoch", name);
  const double best = read_numbers(entries, "best", 1, name)[0];
  // best starts at +-inf, so only NaN is invalid.
  TG_CHECK(!std::isnan(best), name, ".load_state_dict: 'best' is NaN");
  const int64_t bad = read_count(entries, "num_bad_epochs", name);
  const int64_t cooldown = read_count(entries, "cooldown_counter", name);
  last_epoch_ = epoch;
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown;
}

}  // namespace tapegrad::optim
