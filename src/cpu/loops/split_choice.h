// Note [measured choice between one thread and a team]: whether a piece of work runs faster on one
// thread or split between the cores is not always known in advance. On a virtual machine it changes
// from minute to minute: when the vCPUs share a last-level cache a second thread that reads what the
// first wrote costs little, when they do not it can lose more than it gains (docs/benchmarks.md, "This
// machine has two states"). Where both ways give the same bits, a kind of call may simply measure
// them: SplitChoice keeps a running average of each way's time, tries each a few times first, then
// takes the faster, and tries the other once every kProbeEvery calls to notice a change. Used by the
// batch-1 LSTM recurrence (kernels/lstm_batch1.h) and by sgemm_avx512's mid-sized products.
#pragma once

namespace tapegrad::cpu {

// The choice for one kind of call. Not thread-safe by itself: each user keeps its choices under a
// lock or per thread.
class SplitChoice {
 public:
  // Threads for the next call: max_parts (the split) or 1.
  int choose(int max_parts);
  // A call on `parts` threads took `ns` (per step, or per call: any unit, the same for both ways).
  void record(int parts, int max_parts, double ns);

  static constexpr int kWarmCalls = 3;     // each way, before the averages decide
  static constexpr int kProbeEvery = 64;   // calls between tries of the way not taken
  static constexpr double kWeight = 0.25;  // of a new time in the running average

 private:
  double average_[2] = {0.0, 0.0};  // [0] one thread, [1] the split
  int samples_[2] = {0, 0};
  long long calls_ = 0;
};

}  // namespace tapegrad::cpu
