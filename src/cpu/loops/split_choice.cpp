#include "cpu/loops/split_choice.h"

namespace tapegrad::cpu {

int SplitChoice::choose(int max_parts) {
  if (max_parts <= 1) return 1;
  // Alternate while either way has too few calls: the split first.
  if (samples_[1] <= kWarmCalls || samples_[0] <= kWarmCalls) return samples_[1] <= samples_[0] ? max_parts : 1;
  const bool split_faster = average_[1] <= average_[0];
  const bool probe = ++calls_ % kProbeEvery == 0;
  return split_faster != probe ? max_parts : 1;
}

void SplitChoice::record(int parts, int max_parts, double ns) {
  if (max_parts <= 1) return;
  const int way = parts > 1 ? 1 : 0;
  if (samples_[way] == 1) {
    average_[way] = ns;
  } else if (samples_[way] > 1) {
    average_[way] += kWeight * (ns - average_[way]);
  }
  ++samples_[way];
}

}  // namespace tapegrad::cpu
