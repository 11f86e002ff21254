// The measured choice between one thread and a team (Note [measured choice between one thread and
// a team], src/cpu/loops/split_choice.h), used by the batch-1 LSTM recurrence and by sgemm's
// mid-sized products, fed made-up times: each way is tried first, the faster is kept, the other is
// tried again now and then (less often while it loses by far), and a change in which is faster is
// followed.
#include <gtest/gtest.h>

#include <vector>

#include "cpu/loops/split_choice.h"

namespace {

using tapegrad::cpu::SplitChoice;

// Runs `calls` calls, each taking split_ns or single_ns per step as its way; returns the ways.
std::vector<int> run(SplitChoice& choice, int calls, double split_ns, double single_ns, int max_parts = 2) {
  std::vector<int> ways;
  for (int i = 0; i < calls; ++i) {
    const int parts = choice.choose(max_parts);
    ways.push_back(parts);
    choice.record(parts, max_parts, parts > 1 ? split_ns : single_ns);
  }
  return ways;
}

int count(const std::vector<int>& ways, int parts) {
  int n = 0;
  for (int w : ways) n += w == parts;
  return n;
}

TEST(SplitChoice, AlternatesTheWaysFirstStartingWithTheSplit) {
  SplitChoice choice;
  const std::vector<int> ways = run(choice, SplitChoice::kTrialCalls, 1000, 2000);
  for (int i = 0; i < SplitChoice::kTrialCalls; ++i) EXPECT_EQ(ways[i], i % 2 == 0 ? 2 : 1) << "call " << i;
}

// Each way's first call is left out of its average: a cold first call of the faster way does not
// make the slower one win.
TEST(SplitChoice, AColdFirstCallIsNotHeldAgainstAWay) {
  SplitChoice choice;
  choice.record(2, 2, 1e6);  // the split's first call: cold, very slow
  choice.record(1, 2, 2000);
  for (int i = 0; i < SplitChoice::kWarmCalls; ++i) {
    choice.record(2, 2, 1000);
    choice.record(1, 2, 2000);
  }
  const std::vector<int> ways = run(choice, SplitChoice::kProbeEvery - 1, 1000, 2000);
  EXPECT_EQ(count(ways, 2), SplitChoice::kProbeEvery - 1);
}

// Ways close in time (the slower within kFarSlower of the faster): a probe every kProbeEvery calls.
TEST(SplitChoice, KeepsTheFasterWayAndProbesTheOther) {
  for (bool split_faster : {true, false}) {
    SplitChoice choice;
    run(choice, SplitChoice::kTrialCalls, split_faster ? 1800 : 2200, 2000);
    const std::vector<int> ways = run(choice, 10 * SplitChoice::kProbeEvery, split_faster ? 1800 : 2200, 2000);
    const int slower = split_faster ? 1 : 2;
    EXPECT_EQ(count(ways, slower), 10) << "one probe every " << SplitChoice::kProbeEvery << " calls";
  }
}

// A way far slower is tried after 64, 128, 256, ... calls, up to every kMaxProbeEvery: in 64 + 128
// + 256 + 512 * 4 calls, seven tries (the last at the end). The control: the same calls with the
// ways close in time try the other way every 64 calls.
TEST(SplitChoice, TriesOfAFarSlowerWayBackOff) {
  for (bool split_faster : {true, false}) {
    SplitChoice choice;
    run(choice, SplitChoice::kTrialCalls, split_faster ? 1000 : 3000, 2000);
    const int calls = 64 + 128 + 256 + 4 * 512;
    static_assert(SplitChoice::kProbeEvery == 64 && SplitChoice::kMaxProbeEvery == 512);
    const std::vector<int> ways = run(choice, calls, split_faster ? 1000 : 3000, 2000);
    EXPECT_EQ(count(ways, split_faster ? 1 : 2), 7);
    EXPECT_EQ(ways.back(), split_faster ? 1 : 2) << "the seventh try is the last call";
  }
  SplitChoice close;
  run(close, SplitChoice::kTrialCalls, 1000, 1100);
  const std::vector<int> ways = run(close, 64 + 128 + 256 + 4 * 512, 1000, 1100);
  EXPECT_EQ(count(ways, 1), (64 + 128 + 256 + 4 * 512) / SplitChoice::kProbeEvery);
}

// After a long back-off, a way not kept that becomes the faster is tried within kMaxProbeEvery
// calls, then at every call until its running average shows it faster (five tries from 5000 to
// 1000 against 2000), and kept from then on; the tries return to every kProbeEvery calls while the
// two stay close.
TEST(SplitChoice, AWayThatBecomesFasterIsFoundAfterABackOff) {
  SplitChoice choice;
  run(choice, SplitChoice::kTrialCalls + 20 * SplitChoice::kMaxProbeEvery, 5000, 2000);  // one thread kept
  int calls = 0;  // the split wins now: calls until it is tried
  while (calls < SplitChoice::kMaxProbeEvery && run(choice, 1, 1000, 2000)[0] == 1) ++calls;
  EXPECT_LT(calls, SplitChoice::kMaxProbeEvery);
  // Tried at once again until kept, then kept but for a try of one thread now and then.
  EXPECT_GE(count(run(choice, 100, 1000, 2000), 2), 97);
  SplitChoice close;
  run(close, SplitChoice::kTrialCalls + 20 * SplitChoice::kMaxProbeEvery, 5000, 2000);
  run(close, SplitChoice::kMaxProbeEvery + 8, 2100, 2000);  // a try finds the split close again
  EXPECT_EQ(count(run(close, 4 * SplitChoice::kProbeEvery, 2100, 2000), 2), 4);
}

TEST(SplitChoice, FollowsAChangeOfWhichIsFaster) {
  SplitChoice choice;
  run(choice, SplitChoice::kTrialCalls + 200, 1000, 2000);  // the split wins
  // The machine gets busy: the split now takes 4000 ns per step. After a few probes of one thread
  // the average says so, and one thread is kept.
  run(choice, 10 * SplitChoice::kProbeEvery, 4000, 2000);
  const std::vector<int> ways = run(choice, SplitChoice::kProbeEvery, 4000, 2000);
  EXPECT_GE(count(ways, 1), SplitChoice::kProbeEvery - 1);
}

TEST(SplitChoice, OneThreadAllowedMeansOneThread) {
  SplitChoice choice;
  const std::vector<int> ways = run(choice, 10, 1, 1000, /*max_parts=*/1);
  EXPECT_EQ(count(ways, 1), 10);
}

}  // namespace
