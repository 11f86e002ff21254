#include "cpu/loops/split_choice.h"

#include <algorithm>

namespace tapegrad::cpu {

int SplitChoice::choose(int max_parts) {
  if (max_parts <= 1) return 1;
  // Alternate while either way has too few calls: the split first.
  if (samples_[1] <= kWarmCalls || samples_[0] <= kWarmCalls) return samples_[1] <= samples_[0] ? max_parts : 1;
  const bool split_faster = average_[1] <= average_[0];
  probing_ = ++calls_ >= next_probe_;
  if (probing_) next_probe_ = calls_ + probe_every_;
  return split_faster != probing_ ? max_parts : 1;
}

void SplitChoice::record(int parts, int max_parts, double ns) {
  if (max_parts <= 1) return;
  const int way = parts > 1 ? 1 : 0;
  if (probing_) {  // Note [measured choice between one thread and a team]: how soon to try again
    probing_ = false;
    const double kept = average_[1 - way];
    probe_every_ = ns > kFarSlower * kept ? std::min(2 * probe_every_, kMaxProbeEvery) : kProbeEvery;
    next_probe_ = calls_ + (ns < kept ? 1 : probe_every_);
  }
  if (samples_[way] == 1) {
    average_[way] = ns;
  } else if (samples_[way] > 1) {
    average_[way] += kWeight * (ns - average_[way]);
  }
  ++samples_[way];
}

}  // namespace tapegrad::cpu
