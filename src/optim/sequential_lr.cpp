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
  // The schedulers were made before this one, each setting its epoch-0 lr; the first one's
  // epoch 0 is what counts (PyTorch resets the lrs and re-runs the first scheduler's first step).
  initialize();
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

void SequentialLR::apply(int64_t epoch) {
  const auto [i, local] = locate(epoch);
  schedulers_[i]->set_epoch(local);
  last_lrs_ = schedulers_[i]->get_last_lr();
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
