#include "cpu/loops/split_choice.h"

#include <algorithm>

namespace tapegrad::cpu {

// Note [measured choice between one thread and a team].
int SplitChoice::choose(int max_parts) {
  if (max_parts <= 1) return 1;
  int way;
  if (timed_[0] < kWarmCalls || timed_[1] < kWarmCalls) {
    // The first calls: runs of kTrialRun calls each way in turn, the split first, until each way has
    // kWarmCalls calls timed (the first call of each run changes way and is left out).
    way = (trial_calls_++ / kTrialRun) % 2 == 0 ? 1 : 0;
  } else if (try_left_ > 0 && kept_way() != try_way_) {
    way = try_way_;
    --try_left_;
  } else {  // the way kept (a try that has become it ends), or a try of the other starts
    way = kept_way();
    try_way_ = -1;
    try_left_ = 0;
    if (++calls_ >= next_probe_) {
      try_way_ = 1 - way;
      way = try_way_;
      try_left_ = kTryCalls - 1;
      next_probe_ = calls_ + probe_every_;
    }
  }
  return way == 1 ? max_parts : 1;
}

void SplitChoice::record(int parts, int max_parts, double ns) {
  if (max_parts <= 1) return;
  const int way = parts > 1 ? 1 : 0;
  const bool changed = way != previous_way_;
  previous_way_ = way;
  if (changed) return;  // the change of way, not the way
  const bool warm = timed_[0] >= kWarmCalls && timed_[1] >= kWarmCalls;
  if (warm && way == try_way_ && try_left_ == 0) {  // the last call of a try: how soon to try again
    const double kept = average_[1 - way];
    probe_every_ = ns > kFarSlower * kept ? std::min(2 * probe_every_, kMaxProbeEvery) : kProbeEvery;
    if (ns < kept) {
      try_left_ = 1;  // faster: go on with it until its average says so
    } else {
      next_probe_ = calls_ + probe_every_;
    }
  } else if (timed_[way] > 0 && ns > kFarSlower * average_[way] && !set_aside_[way]) {
    set_aside_[way] = true;  // a lone slow call: set aside, a second in a row is taken
    return;
  }
  set_aside_[way] = false;
  average_[way] = timed_[way] == 0 ? ns : average_[way] + kWeight * (ns - average_[way]);
  ++timed_[way];
}

}  // namespace tapegrad::cpu
