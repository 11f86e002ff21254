// SequentialLR: schedulers run one after another, each from its own epoch 0.
#include <algorithm>

#include "optim/scheduler_state.h"
#include "tapegrad/optim/scheduler.h"

namespace tapegrad::optim {

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, "SequentialLR"), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  TG_CHECK(!schedulers_.empty(), "SequentialLR: expects at least one scheduler");
  TG_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: expects ", schedulers_.size() - 1,
           " milestones (one fewer than schedulers), got ", milestones_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    TG_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler ", i, " is null");
    TG_CHECK(&schedulers_[i]->optimizer() == &optimizer, "SequentialLR: scheduler ", i, " (", schedulers_[i]->name(),
             ") acts on another optimiser than the one given");
  }
  for (size_t i = 0; i < milestones_.size(); ++i)
    TG_CHECK(milestones_[i] > 0 && (i == 0 || milestones_[i] > milestones_[i - 1]),
             "SequentialLR: milestones must be increasing and positive, got ", milestones_[i], " at position ", i);
  // The schedulers were made before this one, each taking its first step; as PyTorch does, the
  // lrs go back to initial_lr, every scheduler's first step is undone, and the first one's redone.
  auto groups = optimizer.param_groups();
  std::vector<double> lrs_before;
  for (size_t g = 0; g < groups.size(); ++g) {
    lrs_before.push_back(groups[g].lr());
    groups[g].lr(groups[g].initial_lr());
  }
  for (auto& scheduler : schedulers_) scheduler->undo_initial_step();
  try {
    schedulers_[0]->advance(schedulers_[0]->epoch_ + 1, /*closed_form=*/false);
  } catch (...) {
    for (auto& scheduler : schedulers_) ++scheduler->epoch_;
    for (size_t g = 0; g < groups.size(); ++g) groups[g].lr(lrs_before[g]);
    throw;
  }
  epoch_ = 0;
  last_lrs_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::undo_initial_step() {
  // As PyTorch's recursive_undo: the schedulers inside, not this one's own count.
  for (auto& scheduler : schedulers_) scheduler->undo_initial_step();
}

std::pair<size_t, int64_t> SequentialLR::locate(int64_t epoch) const {
  const size_t i =
      static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  return {i, i == 0 ? epoch : epoch - milestones_[i - 1]};
}

double SequentialLR::lr_at(size_t group, int64_t epoch) const {
  const auto [i, local] = locate(epoch);
  return schedulers_[i]->lr_at(group, local);
}

void SequentialLR::check_epoch(int64_t epoch) const {
  const auto [i, local] = locate(epoch);
  schedulers_[i]->check_epoch(local);
}

void SequentialLR::apply(bool closed_form) {
  const auto [i, local] = locate(last_epoch());
  LRScheduler& scheduler = *schedulers_[i];
  // PyTorch's step(): a scheduler starts at its milestone from its closed form at epoch 0, and
  // steps by its chainable form after that. set_epoch jumps straight to the closed form.
  if (closed_form || (i > 0 && local == 0))
    scheduler.set_epoch(local);
  else
    scheduler.step();
  last_lrs_ = scheduler.get_last_lr();
}

StateDict SequentialLR::state_dict() const {
  StateDict state = LRScheduler::state_dict();
  for (size_t i = 0; i < schedulers_.size(); ++i)
    for (auto& [key, t] : schedulers_[i]->state_dict())
      state.emplace_back("schedulers." + std::to_string(i) + "." + key, t);
  return state;
}

void SequentialLR::load_state_dict(const StateDict& state) {
  StateDict own;
  std::vector<StateDict> parts(schedulers_.size());
  for (const auto& entry : state) {
    const std::string& key = entry.first;
    bool matched = false;
    for (size_t i = 0; i < schedulers_.size() && !matched; ++i) {
      const std::string prefix = "schedulers." + std::to_string(i) + ".";
      if (key.rfind(prefix, 0) == 0) {
        parts[i].emplace_back(key.substr(prefix.size()), entry.second);
        matched = true;
      }
    }
    if (!matched) own.push_back(entry);
  }
  // All or nothing: a scheduler that refuses its part puts back the ones loaded before it.
  std::vector<StateDict> before(schedulers_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i) before[i] = schedulers_[i]->state_dict();
  const StateDict own_before = LRScheduler::state_dict();
  size_t loaded = 0;
  try {
    for (; loaded < schedulers_.size(); ++loaded) schedulers_[loaded]->load_state_dict(parts[loaded]);
    LRScheduler::load_state_dict(own);
  } catch (...) {
    for (size_t i = 0; i < loaded; ++i) schedulers_[i]->load_state_dict(before[i]);
    LRScheduler::load_state_dict(own_before);
    throw;
  }
}

}  // namespace tapegrad::optim
