// Note [measured choice between one thread and a team]: whether a piece of work runs faster on one
// thread or split between the cores is not always known in advance. On a virtual machine it changes
// from minute to minute: when the vCPUs share a last-level cache a second thread that reads what the
// first wrote costs little, when they do not it can lose more than it gains (docs/benchmarks.md, "This
// machine has two states"). Where both ways give the same bits, a kind of call may simply measure
// them: SplitChoice tries the two ways in turn first, leaving each way's first call out (it pays
// for cold caches and first allocations, which a long run does not see again), keeps a running
// average of each way's time, then takes the faster, and tries the other once every kProbeEvery
// calls to notice a change. Used by the
// batch-1 LSTM recurrence (kernels/lstm_split.h) and by sgemm_avx512's mid-sized products.
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

  static constexpr int kWarmCalls = 3;  // timed calls each way, after its first, before the averages decide
  static constexpr int kTrialCalls = 2 * (kWarmCalls + 1);  // the calls that alternate the two ways
  static constexpr int kProbeEvery = 64;                    // calls between tries of the way not taken
  static constexpr double kWeight = 0.25;                   // of a new time in the running average

 private:
  double average_[2] = {0.0, 0.0};  // [0] one thread, [1] the split
  int samples_[2] = {0, 0};         // calls made each way, the first (not averaged) included
  long long calls_ = 0;
};

}  // namespace tapegrad::cpu
