// The measured choice between one thread and a team (Note [measured choice between one thread and
// a team], src/cpu/loops/split_choice.h), used by the batch-1 LSTM recurrence and by sgemm's
// mid-sized products, fed made-up times: each way is tried first, two calls at a time, the faster
// is kept, the other is tried again now and then (less often while it loses by far), a change in
// which is faster is followed, and neither the call that changes way nor a lone slow call of the
// way kept is taken as the way's time.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "cpu/loops/split_choice.h"

namespace {

using tapegrad::cpu::SplitChoice;

// Runs `calls` calls; time(parts, changed) gives each call's time, `changed` when its way differs
// from the call before's. Returns the ways.
std::vector<int> run_timed(SplitChoice& choice, int calls, const std::function<double(int, bool)>& time,
                           int max_parts = 2) {
  std::vector<int> ways;
  for (int i = 0; i < calls; ++i) {
    const int parts = choice.choose(max_parts);
    const bool changed = !ways.empty() && ways.back() != parts;
    ways.push_back(parts);
    choice.record(parts, max_parts, time(parts, changed));
  }
  return ways;
}

// Each call takes split_ns or single_ns as its way, whatever came before.
std::vector<int> run(SplitChoice& choice, int calls, double split_ns, double single_ns, int max_parts = 2) {
  return run_timed(
      choice, calls, [&](int parts, bool) { return parts > 1 ? split_ns : single_ns; }, max_parts);
}

int count(const std::vector<int>& ways, int parts) {
  int n = 0;
  for (int w : ways) n += w == parts;
  return n;
}

// Tries of the other way within `ways`: runs of it.
int tries(const std::vector<int>& ways, int other) {
  int n = 0;
  for (size_t i = 0; i < ways.size(); ++i) n += ways[i] == other && (i == 0 || ways[i - 1] != other);
  return n;
}

TEST(SplitChoice, AlternatesTheWaysFirstTwoCallsAtATimeStartingWithTheSplit) {
  SplitChoice choice;
  const std::vector<int> ways = run(choice, SplitChoice::kTrialCalls, 1000, 2000);
  for (int i = 0; i < SplitChoice::kTrialCalls; ++i)
    EXPECT_EQ(ways[i], (i / SplitChoice::kTrialRun) % 2 == 0 ? 2 : 1) << "call " << i;
}

// The first call of each way, and every call that changes way, pays for the change (caches the
// other way left cold) and is left out: a split that is faster once warm is chosen after the first
// calls and kept, although every change to it costs ten times as much, and when one thread has been
// kept for long (the split was slower) and the split becomes the faster, a try finds it. The
// control: the first call of every try of the split was far slower than the way kept, so a try
// judged by it would never have found the split.
TEST(SplitChoice, TheCallThatChangesWayIsLeftOut) {
  double split_warm = 1000;
  std::vector<double> try_starts;  // the first call of each run of the split
  const auto cold_changes = [&](int parts, bool changed) {
    const double ns = (parts > 1 ? split_warm : 2000.0) * (changed ? 10 : 1);
    if (parts > 1 && changed) try_starts.push_back(ns);
    return ns;
  };
  SplitChoice choice;
  run_timed(choice, SplitChoice::kTrialCalls, cold_changes);
  std::vector<int> ways = run_timed(choice, 20 * SplitChoice::kProbeEvery, cold_changes);
  EXPECT_GE(count(ways, 2), 20 * SplitChoice::kProbeEvery - 20 * SplitChoice::kTryCalls);
  SplitChoice slower_first;
  split_warm = 5000;  // one thread is kept ...
  run_timed(slower_first, SplitChoice::kTrialCalls + 4 * SplitChoice::kMaxProbeEvery, cold_changes);
  split_warm = 1000;  // ... until the split becomes the faster
  try_starts.clear();
  ways = run_timed(slower_first, SplitChoice::kMaxProbeEvery + 100, cold_changes);
  EXPECT_GE(count(std::vector<int>(ways.end() - 50, ways.end()), 2), 50 - SplitChoice::kTryCalls);
  ASSERT_FALSE(try_starts.empty());
  for (double ns : try_starts) EXPECT_GT(ns, SplitChoice::kFarSlower * 2000) << "the control";
}

// Ways close in time (the slower within kFarSlower of the faster): a try of kTryCalls calls every
// kProbeEvery calls of the way kept.
TEST(SplitChoice, KeepsTheFasterWayAndTriesTheOther) {
  for (bool split_faster : {true, false}) {
    SplitChoice choice;
    run(choice, SplitChoice::kTrialCalls, split_faster ? 1800 : 2200, 2000);
    const int calls = 10 * (SplitChoice::kProbeEvery + 1);
    const std::vector<int> ways = run(choice, calls, split_faster ? 1800 : 2200, 2000);
    const int slower = split_faster ? 1 : 2;
    EXPECT_EQ(tries(ways, slower), 10);
    EXPECT_EQ(count(ways, slower), 10 * SplitChoice::kTryCalls);
  }
}

// A try is judged by its last call: a first call of the try that is far slower (it changed way)
// does not make the tries back off.
TEST(SplitChoice, ATryIsJudgedByItsLastCall) {
  SplitChoice choice;
  const auto times = [](int parts, bool changed) { return (parts > 1 ? 1800.0 : 2000.0) * (changed ? 3 : 1); };
  run_timed(choice, SplitChoice::kTrialCalls, times);
  const std::vector<int> ways = run_timed(choice, 10 * (SplitChoice::kProbeEvery + 1), times);
  EXPECT_EQ(tries(ways, 1), 10) << "one try every " << SplitChoice::kProbeEvery << " calls, not backed off";
}

// A lone call of the way kept far slower than its average (caches cooled by other work) is set
// aside; a second in a row is taken. The control: two slow calls in a row move the choice.
TEST(SplitChoice, ALoneSlowCallOfTheWayKeptIsSetAside) {
  SplitChoice choice;
  run(choice, SplitChoice::kTrialCalls + 10, 1000, 1300);
  ASSERT_EQ(run(choice, 1, 1000, 1300)[0], 2);
  EXPECT_EQ(run(choice, 1, 6000, 1300)[0], 2);  // the lone slow call, set aside
  EXPECT_EQ(run(choice, 1, 1000, 1300)[0], 2);
  EXPECT_EQ(run(choice, 5, 1000, 1300), std::vector<int>(5, 2));
  run(choice, 2, 6000, 1300);  // two in a row: the second is taken, 1000 -> 2250 on average
  EXPECT_EQ(run(choice, 1, 6000, 1300)[0], 1);
}

// A way far slower is tried after 64, 128, 256, ... calls, up to every kMaxProbeEvery: in
// 64 + 128 + 256 + 4 * 512 calls of the way kept, seven tries. The control: the same calls with the
// ways close in time try the other way every 64 calls.
TEST(SplitChoice, TriesOfAFarSlowerWayBackOff) {
  static_assert(SplitChoice::kProbeEvery == 64 && SplitChoice::kMaxProbeEvery == 512);
  const int kept_calls = 64 + 128 + 256 + 4 * 512;
  for (bool split_faster : {true, false}) {
    SplitChoice choice;
    run(choice, SplitChoice::kTrialCalls, split_faster ? 1000 : 3000, 2000);
    const std::vector<int> ways =
        run(choice, kept_calls + 7 * (SplitChoice::kTryCalls - 1), split_faster ? 1000 : 3000, 2000);
    EXPECT_EQ(tries(ways, split_faster ? 1 : 2), 7);
    EXPECT_EQ(ways.back(), split_faster ? 1 : 2) << "the seventh try ends the calls";
  }
  SplitChoice close;
  run(close, SplitChoice::kTrialCalls, 1000, 1100);
  const std::vector<int> ways = run(close, kept_calls, 1000, 1100);
  EXPECT_EQ(tries(ways, 1), kept_calls / (SplitChoice::kProbeEvery + 1));
}

// After a long back-off, a way not kept that becomes the faster is tried within kMaxProbeEvery
// calls, goes on while it is faster until its running average shows it (a few calls from 5000 to
// 1000 against 2000), and is kept from then on; the tries return to every kProbeEvery calls while
// the two stay close.
TEST(SplitChoice, AWayThatBecomesFasterIsFoundAfterABackOff) {
  SplitChoice choice;
  run(choice, SplitChoice::kTrialCalls + 20 * SplitChoice::kMaxProbeEvery, 5000, 2000);  // one thread kept
  int calls = 0;  // the split wins now: calls until it is tried
  while (calls < SplitChoice::kMaxProbeEvery + 1 && run(choice, 1, 1000, 2000)[0] == 1) ++calls;
  EXPECT_LE(calls, SplitChoice::kMaxProbeEvery);
  // Tried on until kept, then kept but for a try of one thread now and then.
  EXPECT_GE(count(run(choice, 100, 1000, 2000), 2), 100 - SplitChoice::kTryCalls);
  SplitChoice close;
  run(close, SplitChoice::kTrialCalls + 20 * SplitChoice::kMaxProbeEvery, 5000, 2000);
  run(close, SplitChoice::kMaxProbeEvery + 8, 2100, 2000);  // a try finds the split close again
  EXPECT_EQ(tries(run(close, 4 * (SplitChoice::kProbeEvery + 1), 2100, 2000), 2), 4);
}

TEST(SplitChoice, FollowsAChangeOfWhichIsFaster) {
  SplitChoice choice;
  run(choice, SplitChoice::kTrialCalls + 200, 1000, 2000);  // the split wins
  // The machine gets busy: the split now takes 4000 ns per step. After a few probes of one thread
  // the average says so, and one thread is kept.
  run(choice, 10 * SplitChoice::kProbeEvery, 4000, 2000);
  const std::vector<int> ways = run(choice, SplitChoice::kProbeEvery, 4000, 2000);
  EXPECT_GE(count(ways, 1), SplitChoice::kProbeEvery - SplitChoice::kTryCalls);
}

TEST(SplitChoice, OneThreadAllowedMeansOneThread) {
  SplitChoice choice;
  const std::vector<int> ways = run(choice, 10, 1, 1000, /*max_parts=*/1);
  EXPECT_EQ(count(ways, 1), 10);
}

}  // namespace
