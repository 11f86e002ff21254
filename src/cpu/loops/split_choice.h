// Note [measured choice between one thread and a team]: whether a piece of work runs faster on one
// thread or split between the cores is not always known in advance. On a virtual machine it changes
// from minute to minute: when the vCPUs share a last-level cache a second thread that reads what the
// first wrote costs little, when they do not it can lose more than it gains (docs/benchmarks.md, "This
// machine has two states"). Where both ways give the same bits, a kind of call may simply measure
// them: SplitChoice tries the two ways in turn first, leaving each way's first call out (it pays
// for cold caches and first allocations, which a long run does not see again), keeps a running
// average of each way's time, then takes the faster, and tries the other now and then to notice a
// change: after kProbeEvery calls, and after twice as many each time a try comes out more than
// kFarSlower times the way kept, up to kMaxProbeEvery; a try that comes out faster than the way
// kept is repeated at the next call, so that the average follows it within a few calls. The way
// kept is timed at every call, so when it becomes the slower one the choice changes at once; a way
// not kept that becomes the faster is found within kMaxProbeEvery calls (a tenth of a second of
// LSTM steps).
//
// The tries are not free. On the 2-vCPU Zen 5 machine with its vCPUs on two L3s, a split
// `lstm_small`:1 forward took 5-6 us a step against 2.3 on one thread, so a try every 64 calls cost
// a one-thread step about 1.5%, and every try woke the other vCPU, which then spun waiting for more
// work. With the back-off, two runs that stayed on two L3s took 0.285 and 0.275 ms a step on 2
// threads, against 0.299 and 0.298 before and 0.292 and 0.277 on one thread (each triple within a
// minute); on one L3, eight triples, 0.227-0.251 (median 0.235) against 0.235-0.250 (0.242), the
// tries of one thread losing by far there too.
//
// Used by the batch-1 LSTM recurrence (kernels/lstm_split.h) and by sgemm_avx512's mid-sized
// products.
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
  static constexpr int kProbeEvery = 64;                    // calls between tries of the way not taken, at first
  static constexpr int kMaxProbeEvery = 512;                // and at most, after tries that lost by far
  static constexpr double kFarSlower = 1.25;                // a try slower than this times the way kept loses by far
  static constexpr double kWeight = 0.25;                   // of a new time in the running average

 private:
  double average_[2] = {0.0, 0.0};  // [0] one thread, [1] the split
  int samples_[2] = {0, 0};         // calls made each way, the first (not averaged) included
  long long calls_ = 0;             // calls after the trial ones
  long long next_probe_ = kProbeEvery;
  int probe_every_ = kProbeEvery;
  bool probing_ = false;  // the call chosen last is a try of the way not kept
};

}  // namespace tapegrad::cpu
