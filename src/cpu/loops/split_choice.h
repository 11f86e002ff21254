// Note [measured choice between one thread and a team]: whether a piece of work runs faster on one
// thread or split between the cores is not always known in advance. On a virtual machine it changes
// from minute to minute: when the vCPUs share a last-level cache a second thread that reads what the
// first wrote costs little, when they do not it can lose more than it gains (docs/benchmarks.md, "This
// machine has two states"). Where both ways give the same bits, a kind of call may simply measure
// them: SplitChoice tries the two ways in turn first, keeps a running average of each way's time,
// then takes the faster, and tries the other now and then to notice a change: after kProbeEvery
// calls, and after twice as many each time a try comes out more than kFarSlower times the way kept,
// up to kMaxProbeEvery; a try that comes out faster than the way kept goes on at the next call, so
// that the average follows it within a few calls. The way kept is timed at every call, so when it
// becomes the slower one the choice changes within a few calls; a way not kept that becomes the
// faster is found within kMaxProbeEvery calls (a tenth of a second of LSTM steps).
//
// What is timed must be the way, not the change of way. The first call after a change pays for it:
// each thread's share of the weights sits in its own core's L2 while the split runs, and the whole
// of them in one core's while one thread does, so the call that changes way pulls them over first.
// Judged by that call, every try of the way not kept looked far slower than it was: in one run of
// `lstm_small`:1 (one L3) 85% of the recurrence's calls went to one thread, whose calls took 11-18%
// longer per step than the split's, and the step took 0.256 ms; the next run of the same binary kept
// the split and took 0.198. So every call that changes way, and each way's first, is left out of the
// averages (the first also pays for cold caches and first allocations, which a long run does not
// see again), the first calls alternate the ways two at a time, and a try runs the other way for
// kTryCalls calls in a row and is judged by the last. A lone call far slower than its way's average
// (caches cooled by other work in between: a data loader, an evaluation, another library's step) is
// set aside too; a second in a row is taken.
//
// The tries are not free. On the 2-vCPU Zen 5 machine with its vCPUs on two L3s, a split
// `lstm_small`:1 forward took 5-6 us a step against 2.3 on one thread, so a try of one call every 64
// cost a one-thread step about 1.5%, and every try woke the other vCPU, which then spun waiting for
// more work; after the back-off, a try of two calls every 512 costs such a step about half a
// percent.
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

  static constexpr int kWarmCalls = 3;  // timed calls each way before the averages decide
  static constexpr int kTrialRun = 2;   // calls a way runs in a row while the first calls alternate
  // The calls that alternate the two ways: kWarmCalls runs of each, their first calls left out.
  static constexpr int kTrialCalls = 2 * kTrialRun * kWarmCalls;
  static constexpr int kTryCalls = 2;         // calls a try of the way not kept runs in a row
  static constexpr int kProbeEvery = 64;      // calls between tries of the way not taken, at first
  static constexpr int kMaxProbeEvery = 512;  // and at most, after tries that lost by far
  static constexpr double kFarSlower = 1.25;  // a try slower than this times the way kept loses by far
  static constexpr double kWeight = 0.25;     // of a new time in the running average

 private:
  int kept_way() const { return average_[1] <= average_[0] ? 1 : 0; }

  double average_[2] = {0.0, 0.0};      // [0] one thread, [1] the split
  int timed_[2] = {0, 0};               // calls in each way's average
  int trial_calls_ = 0;                 // calls chosen while the first calls alternate
  int previous_way_ = -1;               // the way of the call recorded last
  bool set_aside_[2] = {false, false};  // the way's last call was set aside as a lone slow one
  long long calls_ = 0;                 // calls after the trial ones
  long long next_probe_ = kProbeEvery;
  int probe_every_ = kProbeEvery;
  int try_way_ = -1;  // the way a try runs, or -1
  int try_left_ = 0;  // calls of the try still to choose
};

}  // namespace tapegrad::cpu
