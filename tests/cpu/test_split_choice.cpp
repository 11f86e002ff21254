// The measured choice between one thread and a team (Note [measured choice between one thread and
// a team], src/cpu/loops/split_choice.h), used by the batch-1 LSTM recurrence and by sgemm's
// mid-sized products, fed made-up times: each way is tried first, the faster is kept, the other is
// tried again now and then, and a change in which is faster is followed.
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

TEST(SplitChoice, KeepsTheFasterWayAndProbesTheOther) {
  for (bool split_faster : {true, false}) {
    SplitChoice choice;
    run(choice, SplitChoice::kTrialCalls, split_faster ? 1000 : 3000, 2000);
    const std::vector<int> ways = run(choice, 10 * SplitChoice::kProbeEvery, split_faster ? 1000 : 3000, 2000);
    const int slower = split_faster ? 1 : 2;
    EXPECT_EQ(count(ways, slower), 10) << "one probe every " << SplitChoice::kProbeEvery << " calls";
  }
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
