// StepLR and CosineAnnealingLR.
#include "tapegrad/optim/scheduler.h"

#include <cmath>

namespace tapegrad::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() { set_epoch(epoch_ + 1); }

void LRScheduler::set_epoch(int64_t epoch) {
  TG_CHECK(epoch >= 0, "LRScheduler: epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  optimizer_.set_lr(lr_at(epoch));
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  TG_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  TG_CHECK(gamma > 0 && std::isfinite(gamma), "StepLR: invalid gamma ", gamma);
}

double StepLR::lr_at(int64_t epoch) const {
  return base_lr() * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  TG_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", t_max);
  TG_CHECK(eta_min >= 0 && std::isfinite(eta_min), "CosineAnnealingLR: invalid eta_min ", eta_min);
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  const double pi = 3.14159265358979323846;
  return eta_min_ + (base_lr() - eta_min_) * (1 + std::cos(pi * static_cast<double>(epoch) / t_max_)) / 2;
}

}  // namespace tapegrad::optim
