// Learning-rate schedulers, stepped once per epoch like torch.optim.lr_scheduler:
//   optim::StepLR sched(opt, /*step_size=*/10, /*gamma=*/0.1);  ...  sched.step();
#pragma once

#include <cstdint>

#include "tapegrad/optim/optimizer.h"

namespace tapegrad::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  // Advances one epoch and sets the optimiser's learning rate for it.
  void step();
  int64_t last_epoch() const { return epoch_; }
  double base_lr() const { return base_lr_; }
  // Resumes at `epoch` (for checkpoints): sets the learning rate that epoch would have.
  void set_epoch(int64_t epoch);

 protected:
  virtual double lr_at(int64_t epoch) const = 0;

 private:
  Optimizer& optimizer_;
  double base_lr_;
  int64_t epoch_ = 0;
};

// lr = base_lr * gamma^floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2 (the closed form).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

}  // namespace tapegrad::optim
